//! Go's `filepath.Match`, the glob containerd resolves `imports` with: how kata-live tells
//! which file an import reads (and whether the configured import covers the drop-in).

/// Whether `name` matches the glob `pattern` .
pub fn matches(pattern: &str, name: &str) -> bool {
    glob_match(pattern.as_bytes(), name.as_bytes())
}

/// Go's `filepath.Match` on bytes: `*` (no `/`), `?`, `[...]` classes with ranges and `^`,
/// `\` escapes. A malformed pattern matches nothing (Go answers ErrBadPattern).
fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    match pat.first() {
        None => name.is_empty(),
        Some(b'*') => {
            let rest = &pat[1..];
            (0..=name.len())
                .take_while(|&i| i == 0 || name[i - 1] != b'/')
                .any(|i| glob_match(rest, &name[i..]))
        }
        Some(b'?') => match name.first() {
            Some(&c) if c != b'/' => glob_match(&pat[1..], &name[1..]),
            _ => false,
        },
        Some(b'[') => {
            let Some((&c, tail)) = name.split_first() else {
                return false;
            };
            match class(&pat[1..], c) {
                Some((true, after)) if c != b'/' => glob_match(after, tail),
                _ => false,
            }
        }
        Some(b'\\') => match (pat.get(1), name.first()) {
            (Some(p), Some(c)) if p == c => glob_match(&pat[2..], &name[1..]),
            _ => false,
        },
        Some(p) => name.first() == Some(p) && glob_match(&pat[1..], &name[1..]),
    }
}

/// A class body after `[`: (whether `c` matches, the pattern after `]`).
fn class(pat: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let (neg, mut p) = match pat.first() {
        Some(b'^') => (true, &pat[1..]),
        _ => (false, pat),
    };
    let mut hit = false;
    let mut first = true;
    loop {
        match p.first()? {
            b']' if !first => return Some((hit != neg, &p[1..])),
            _ => {
                let (lo, rest) = class_char(p)?;
                let (hi, rest) = match rest.first() {
                    Some(b'-') if rest.get(1) != Some(&b']') => class_char(&rest[1..])?,
                    _ => (lo, rest),
                };
                hit |= lo <= c && c <= hi;
                p = rest;
            }
        }
        first = false;
    }
}

fn class_char(p: &[u8]) -> Option<(u8, &[u8])> {
    match p.first()? {
        b'\\' => Some((*p.get(1)?, &p[2..])),
        b'-' | b']' => None,
        &c => Some((c, &p[1..])),
    }
}
