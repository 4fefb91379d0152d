//! The typed decoding of systemd's property values (`a{sv}` maps from `Properties.GetAll`),
//! pure and without a bus: below both the connection ([`super::client`]) and the reads
//! ([`super::properties`]), so that neither has to import the other for it. A value that is
//! missing or of another type decodes as the type's empty value, as systemd reports an
//! unset property.

use std::collections::HashMap;

use zbus::{OwnedObjectPath, OwnedVariant};

pub(super) fn prop_string(m: &HashMap<String, OwnedVariant>, k: &str) -> String {
    m.get(k)
        .and_then(|v| <&str>::try_from(v).ok())
        .unwrap_or_default()
        .to_string()
}

pub(super) fn prop_strings(m: &HashMap<String, OwnedVariant>, k: &str) -> Vec<String> {
    m.get(k)
        .and_then(|v| Vec::<String>::try_from(v.try_clone().ok()?).ok())
        .unwrap_or_default()
}

/// The `Job` property, a `(uo)` pair: (0, "") when no job is pending (systemd sends "/").
pub(super) fn prop_job(m: &HashMap<String, OwnedVariant>) -> (u32, String) {
    m.get("Job")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| <(u32, OwnedObjectPath)>::try_from(v).ok())
        .filter(|(id, _)| *id != 0)
        .map(|(id, path)| (id, path.to_string()))
        .unwrap_or_default()
}

pub(super) fn prop_bool(m: &HashMap<String, OwnedVariant>, k: &str) -> bool {
    m.get(k)
        .and_then(|v| bool::try_from(v).ok())
        .unwrap_or(false)
}

pub(super) fn prop_u32(m: &HashMap<String, OwnedVariant>, k: &str) -> u32 {
    m.get(k).and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

pub(super) fn prop_i32(m: &HashMap<String, OwnedVariant>, k: &str) -> i32 {
    m.get(k).and_then(|v| i32::try_from(v).ok()).unwrap_or(0)
}

pub(super) fn prop_u64(m: &HashMap<String, OwnedVariant>, k: &str) -> u64 {
    m.get(k).and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

/// `ay` property as lowercase hex (InvocationID: 16 bytes -> 32 digits; empty when unset).
pub(super) fn prop_hex(m: &HashMap<String, OwnedVariant>, k: &str) -> String {
    let Some(bytes) = m
        .get(k)
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<u8>::try_from(v).ok())
    else {
        return String::new();
    };
    if bytes.iter().all(|b| *b == 0) {
        return String::new();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: Vec<(&str, zbus::Variant<'static>)>) -> HashMap<String, OwnedVariant> {
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), OwnedVariant::try_from(v).unwrap()))
            .collect()
    }

    #[test]
    fn values_decode_and_a_missing_or_mistyped_one_is_empty() {
        let m = map(vec![
            ("S", "active".into()),
            ("B", true.into()),
            ("U", 7u32.into()),
            ("I", (-1i32).into()),
            ("T", 9u64.into()),
            ("Id", vec![0xabu8, 0x01].into()),
            ("Zero", vec![0u8; 16].into()),
        ]);
        assert_eq!(prop_string(&m, "S"), "active");
        assert!(prop_bool(&m, "B"));
        assert_eq!(prop_u32(&m, "U"), 7);
        assert_eq!(prop_i32(&m, "I"), -1);
        assert_eq!(prop_u64(&m, "T"), 9);
        assert_eq!(prop_hex(&m, "Id"), "ab01");
        // An all-zero InvocationID is systemd's "none".
        assert_eq!(prop_hex(&m, "Zero"), "");
        assert_eq!(prop_string(&m, "B"), "");
        assert_eq!(prop_u32(&m, "missing"), 0);
        assert_eq!(prop_strings(&m, "missing"), Vec::<String>::new());
        assert_eq!(prop_job(&m), (0, String::new()));
    }
}
