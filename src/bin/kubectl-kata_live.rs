//! `kubectl-kata_live`: the kubectl plugin `kubectl kata-live rollout status`, run on an
//! administrator's machine (src/rollout/). Its own binary: the host binary stays small.

fn main() -> std::process::ExitCode {
    kata_live::rollout::plugin_main()
}
