//! kata-live's version ordering (`rpm_ostree::evr_cmp`, rpm-version's rpmvercmp) against the
//! `rpm` binary's own (`rpm.vercmp` in rpm's Lua), on random epoch:version-release pairs with
//! the characters that change rpmvercmp's answer: digits, letters, separators, `~` and `^`.
//! Needs rpm (Debian package `rpm`, which .ci/run installs): fails, never skips, without it.

use std::cmp::Ordering;
use std::process::Command;

use kata_live::rpm_ostree::evr_cmp;
use proptest::prelude::*;

type Evr = (u32, String, String);

fn part(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[0-9a-cA-C._+~^]{{1,{max}}}")).unwrap()
}

fn evr() -> impl Strategy<Value = Evr> {
    (prop_oneof![3 => Just(0u32), 1 => 0u32..3], part(8), part(5))
}

fn text((e, v, r): &Evr) -> String {
    format!("{e}:{v}-{r}")
}

/// rpm's answers for every pair, from one `rpm --eval` run.
fn rpm_answers(pairs: &[(Evr, Evr)]) -> Vec<Ordering> {
    let mut lua = String::from("%{lua:");
    for (a, b) in pairs {
        lua.push_str(&format!(
            "print(rpm.vercmp([[{}]], [[{}]])) print(' ') ",
            text(a),
            text(b)
        ));
    }
    lua.push('}');
    let out = Command::new("rpm")
        .args(["--eval", &lua])
        .output()
        .expect("run rpm (is the Debian package `rpm` installed?)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|w| match w {
            "-1" => Ordering::Less,
            "0" => Ordering::Equal,
            "1" => Ordering::Greater,
            other => panic!("rpm.vercmp printed {other:?}"),
        })
        .collect()
}

fn ours((e, v, r): &Evr, (e2, v2, r2): &Evr) -> Ordering {
    evr_cmp((*e, v, r), (*e2, v2, r2))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn ordering_is_rpms(pairs in proptest::collection::vec((evr(), evr()), 64)) {
        let theirs = rpm_answers(&pairs);
        prop_assert_eq!(theirs.len(), pairs.len());
        for ((a, b), want) in pairs.iter().zip(theirs) {
            prop_assert_eq!(ours(a, b), want, "{} vs {}", text(a), text(b));
        }
    }

    #[test]
    fn ordering_is_antisymmetric_and_reflexive(a in evr(), b in evr()) {
        prop_assert_eq!(ours(&a, &b), ours(&b, &a).reverse());
        prop_assert_eq!(ours(&a, &a), Ordering::Equal);
    }
}

#[test]
fn known_orderings_agree_with_rpm() {
    let e = |v: &str, r: &str| (0, v.to_string(), r.to_string());
    let pairs = vec![
        (e("3.21.0", "1.el9"), e("3.20.0", "1.el9")),
        (e("3.9.0", "1.el9"), e("3.10.0", "1.el9")),
        (e("1.0~rc1", "1"), e("1.0", "1")),
        (e("1.0^git1", "1"), e("1.0", "1")),
        (e("1.0", "1.el9"), e("1.0", "1.el9_4")),
        ((1, "1.0".into(), "1".into()), e("9.0", "1")),
    ];
    let theirs = rpm_answers(&pairs);
    let mine: Vec<Ordering> = pairs.iter().map(|(a, b)| ours(a, b)).collect();
    assert_eq!(mine, theirs);
    assert_eq!(
        mine,
        [
            Ordering::Greater,
            Ordering::Less,
            Ordering::Less,
            Ordering::Greater,
            Ordering::Less,
            Ordering::Greater
        ]
    );
}
