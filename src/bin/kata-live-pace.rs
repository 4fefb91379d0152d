//! `kata-live-pace`: the rollout's elected decider (src/pace/elected/), a Deployment of two
//! replicas in the image. Its own binary: the host binary stays small.

fn main() -> std::process::ExitCode {
    kata_live::pace::elected::main()
}
