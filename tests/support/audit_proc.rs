//! A process's CPU time and memory, from /proc.

/// A process's CPU time and memory, from /proc/PID/stat and /proc/PID/status.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcUsage {
    /// User + system time, seconds (clock ticks / sysconf(_SC_CLK_TCK)).
    pub cpu_seconds: f64,
    /// VmRSS.
    pub rss_bytes: u64,
    /// VmHWM: the peak resident set size.
    pub peak_rss_bytes: u64,
}

/// Panics if the process is gone.
pub fn proc_usage(pid: u32) -> ProcUsage {
    let p =
        procfs::process::Process::new(pid as i32).unwrap_or_else(|e| panic!("/proc/{pid}: {e}"));
    let stat = p.stat().unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let status = p
        .status()
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    ProcUsage {
        cpu_seconds: (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64,
        rss_bytes: status.vmrss.unwrap_or(0) * 1024,
        peak_rss_bytes: status.vmhwm.unwrap_or(0) * 1024,
    }
}
