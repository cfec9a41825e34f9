//! `authzd`: parse flags, run the command (which sets up logging), map the outcome to an exit code
//! (0 success/allowed, 1 not allowed/lint problems/runtime or server failure, 2 usage or policy
//! error).

use std::process::ExitCode;

use authzd::app;
use authzd::config::Cli;
use clap::Parser;

/// mimalloc instead of glibc malloc: per-thread free lists make the many short-lived strings of a
/// request (decode, response) cheap on tokio's worker threads. The load generator uses it too,
/// so its in-process no-op server and authzd run on the same allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    let settings = match cli.settings() {
        Ok(settings) => settings,
        Err(usage) => usage.exit(),
    };
    match app::run(settings, log_format) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(error) => {
            eprintln!("{}", error.report());
            ExitCode::from(error.exit_code())
        }
    }
}
