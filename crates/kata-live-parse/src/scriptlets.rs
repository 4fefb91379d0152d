//! What the SELinux tools print that the post-install steps read (`semodule -l`,
//! `getsebool`); kata-live runs them (`kata_live::scriptlets`).

/// Module names in `semodule -l` output: one per line, the name first (older versions
/// add a version column, `-lfull` a priority before it, which we do not request).
pub fn parse_semodule_list(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Value in `getsebool NAME` output: `NAME --> on` (with a pending value,
/// `NAME --> off pending: on`: the pending value is what the policy will hold).
pub fn parse_getsebool(out: &str, name: &str) -> Option<bool> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    let (_, rest) = line.split_once("-->")?;
    let mut words = rest.split_whitespace();
    let mut value = words.next()?;
    if words.next() == Some("pending:") {
        value = words.next()?;
    }
    match value {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semodule_list_formats() {
        let out = "abrt\t1.4.1\ncontainer\nkata 1.0\n\n";
        assert_eq!(parse_semodule_list(out), ["abrt", "container", "kata"]);
    }

    #[test]
    fn getsebool_formats() {
        assert_eq!(
            parse_getsebool("container_use_devices --> on\n", "container_use_devices"),
            Some(true)
        );
        assert_eq!(parse_getsebool("x --> off\n", "x"), Some(false));
        assert_eq!(parse_getsebool("x --> off pending: on\n", "x"), Some(true));
        assert_eq!(parse_getsebool("y --> on\n", "x"), None);
        assert_eq!(parse_getsebool("x --> maybe\n", "x"), None);
    }
}
