//! CRI-O stand-in for the test node (see tests/standins/README.md). Never shipped.

fn main() -> std::process::ExitCode {
    kata_live_standins::crio_daemon::main_entry()
}
