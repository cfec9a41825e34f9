//! `authzd`: parse flags, set up logging, run the command, map the outcome to an exit code
//! (0 success/allowed, 1 not allowed/lint problems/runtime or server failure, 2 usage or policy
//! error).

use std::process::ExitCode;

use authzd::config::{Cli, Command};
use authzd::{app, telemetry};
use clap::Parser;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    telemetry::init(cli.log_format, default_filter);
    let settings = match cli.settings() {
        Ok(settings) => settings,
        Err(usage) => usage.exit(),
    };
    match app::run(settings) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(error) => {
            eprintln!("{}", error.report());
            ExitCode::from(error.exit_code())
        }
    }
}
