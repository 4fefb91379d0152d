//! CRI-O's metrics text (Prometheus exposition), as kata-live reads it for kubelet's calls.

/// Sum of CRI-O's `ListPodSandbox` operation counters in a Prometheus text exposition.
/// CRI-O has spelled the metric `container_runtime_crio_operations` and
/// `container_runtime_crio_operations_total`, and the label `operation="ListPodSandbox"` or
/// the gRPC method `operation="/runtime.v1.RuntimeService/ListPodSandbox"`: all are accepted.
/// `None` when no such series exists.
pub fn list_pod_sandbox_count(metrics: &str) -> Option<f64> {
    let mut total = None;
    for line in metrics.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        if name != "container_runtime_crio_operations_total"
            && name != "container_runtime_crio_operations"
        {
            continue;
        }
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let is_list = labels.split(',').any(|l| {
            l.trim()
                .strip_prefix("operation=\"")
                .and_then(|v| v.strip_suffix('"'))
                .is_some_and(|op| op == "ListPodSandbox" || op.ends_with("/ListPodSandbox"))
        });
        if !is_list {
            continue;
        }
        // "value [timestamp]"
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            total = Some(total.unwrap_or(0.0) + v);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_both_label_forms() {
        let text = "\
# HELP container_runtime_crio_operations_total Cumulative number of CRI-O operations by operation type.
# TYPE container_runtime_crio_operations_total counter
container_runtime_crio_operations_total{operation=\"ListContainers\"} 99
container_runtime_crio_operations_total{operation=\"ListPodSandbox\"} 12
container_runtime_crio_operations_total{operation=\"/runtime.v1.RuntimeService/ListPodSandbox\"} 3
container_runtime_crio_operations_errors_total{operation=\"ListPodSandbox\"} 500
";
        assert_eq!(list_pod_sandbox_count(text), Some(15.0));
        assert_eq!(
            list_pod_sandbox_count(
                "container_runtime_crio_operations{operation=\"ListPodSandbox\"} 7 1700000000\n"
            ),
            Some(7.0)
        );
        assert_eq!(list_pod_sandbox_count("go_goroutines 5\n"), None);
    }
}
