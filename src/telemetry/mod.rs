//! Telemetry: structured logs through `tracing`, OpenTelemetry trace export over OTLP when
//! configured, Prometheus metrics ([`metrics`]) and the per-request layer ([`request`]) that
//! opens each request's span and times it.

pub mod metrics;
pub mod otlp;
pub mod request;

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber: the OTLP layer when traces are exported, the level filter,
/// and the log formatter. `RUST_LOG` (e.g. `authzd=debug`) overrides `default_filter`; it
/// governs exported spans too. Calling it twice is harmless: the second call changes nothing.
pub fn init(format: LogFormat, default_filter: &str, otlp: Option<otlp::OtlpLayer>) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let fmt: Box<dyn Layer<_> + Send + Sync> = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let _already_set = Registry::default()
        .with(otlp)
        .with(filter)
        .with(fmt)
        .try_init();
}
