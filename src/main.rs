use clap::Parser;
use kata_live::{app, cli::Cli, logging};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_verbosity());
    app::run(cli).into()
}
