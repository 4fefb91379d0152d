//! Dispatch from the command line to the flows, and the mapping of errors to exit codes.

use crate::cli::{Cli, Command};
use crate::config::{self, ConfigError, Loaded};
use crate::crio::{self, CrioError, DropIn};
use crate::exit::ExitCode;
use crate::host::Host;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Crio(#[from] CrioError),
    #[error("{0}")]
    NotImplemented(String),
    #[error(transparent)]
    Generate(#[from] crate::generate::GenerateError),
}

impl AppError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            AppError::Config(_) => ExitCode::Usage,
            AppError::Crio(_) => ExitCode::Internal,
            AppError::NotImplemented(_) => ExitCode::NotImplemented,
            AppError::Generate(_) => ExitCode::Usage,
        }
    }
}

/// Runs the command and returns the exit code; errors are printed to stderr.
pub fn run(cli: Cli) -> ExitCode {
    let host = Host::new(&cli.global.root, &cli.global.proc_dir);
    match dispatch(&cli, &host) {
        Ok(code) => code,
        Err(e) => {
            let code = e.exit_code();
            eprintln!("kata-live: error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            eprintln!("kata-live: exit code {code}: {}", code.describe());
            code
        }
    }
}

fn dispatch(cli: &Cli, host: &Host) -> Result<ExitCode, AppError> {
    // Packaging-time generation (man pages, completions) needs no host and no configuration.
    if let Command::Generate(args) = &cli.command {
        crate::generate::run(args)?;
        return Ok(ExitCode::Ok);
    }
    let loaded = config::load(host)?;
    match &cli.command {
        Command::Config => {
            print_config(&loaded, cli.global.json);
            Ok(ExitCode::Ok)
        }
        Command::Install(_) if cli.global.dry_run => {
            dry_run_install(&loaded, host)?;
            Ok(ExitCode::Ok)
        }
        Command::Install(_) => Err(AppError::NotImplemented(
            "install: the package, activation and proof steps are not in this build yet; \
             `kata-live install --dry-run` shows the drop-in it would write"
                .into(),
        )),
        Command::Uninstall(_) => Err(AppError::NotImplemented(
            "uninstall is not in this build yet".into(),
        )),
        Command::Status => Err(AppError::NotImplemented(
            "status is not in this build yet; `kata-live config` shows the configuration".into(),
        )),
        Command::Verify => Err(AppError::NotImplemented(
            "verify is not in this build yet".into(),
        )),
        // Handled above, before the configuration is loaded.
        Command::Generate(_) => Ok(ExitCode::Ok),
    }
}

fn print_config(loaded: &Loaded, json: bool) {
    if json {
        let v = serde_json::json!({
            "config": loaded.config,
            "fragments": loaded.fragments,
            "provenance": loaded.provenance,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", loaded.render_annotated());
    }
}

fn dry_run_install(loaded: &Loaded, host: &Host) -> Result<(), AppError> {
    let cfg = &loaded.config;
    let drop_in = DropIn::new(&host.root, host.path(&cfg.handler.drop_in));
    let desired = crio::render(&cfg.handler)?;
    let current = drop_in.read()?;
    let state = crio::classify(current.as_deref(), &desired);
    let verdict = match state {
        crio::DropInState::Ours => "skip: already holds exactly this content",
        crio::DropInState::Absent => "would create",
        crio::DropInState::Differs => "would update (ours, older content)",
        crio::DropInState::Foreign => "would replace (not written by kata-live; backed up first)",
    };
    println!(
        "drop-in {}: {verdict}\n--- content ---\n{desired}---",
        drop_in.path().display()
    );
    Ok(())
}
