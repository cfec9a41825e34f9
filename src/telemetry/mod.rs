//! Telemetry setup. For now: structured logs through `tracing`, to stderr.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. `RUST_LOG` (e.g. `authzd=debug`) overrides
/// `default_filter`. Calling it twice is harmless: the second call changes nothing.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
