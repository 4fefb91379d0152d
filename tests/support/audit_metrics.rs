//! kube-apiserver's `/metrics`: its request counters.

use std::collections::{BTreeMap, HashMap};

/// `apiserver_request_total` from the Prometheus text of kube-apiserver's `/metrics`, summed
/// by (verb, resource, code) over the other labels. The verb is the metric's (POST, PUT,
/// PATCH, DELETE, GET, LIST, WATCH, APPLY...); the resource carries its subresource
/// ("nodes/status").
pub fn request_totals(text: &str) -> BTreeMap<(String, String, u16), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let (labels, value) = split_labels(rest)
            .unwrap_or_else(|| panic!("malformed apiserver_request_total line: {line}"));
        let value: f64 = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no value in: {line}"));
        let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        let mut resource = get("resource").to_string();
        if !get("subresource").is_empty() {
            resource = format!("{resource}/{}", get("subresource"));
        }
        let code = get("code")
            .parse()
            .unwrap_or_else(|_| panic!("no numeric code in: {line}"));
        *out.entry((get("verb").to_string(), resource, code))
            .or_insert(0.0) += value;
    }
    out
}

/// `k="v",...}` then the rest of the line; values unescaped (\\, \", \n).
fn split_labels(s: &str) -> Option<(HashMap<String, String>, &str)> {
    let mut labels = HashMap::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(tail) = rest.strip_prefix('}') {
            return Some((labels, tail));
        }
        let (key, after) = rest.split_once('=')?;
        let quoted = after.strip_prefix('"')?;
        let mut chars = quoted.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_string(), value);
        rest = &quoted[end + 1..];
    }
}
