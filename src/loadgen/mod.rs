//! `authzd-loadgen`: drives `Authorize`, `BatchAuthorize` and `GetAllowedSubjects` against
//! authzd and, in the same run with the identical load, against an in-process no-op tonic
//! server — the physical limit of gRPC on this machine — and reports both side by side with
//! the ratios authzd ÷ no-op (docs/loadgen.md §3; ratios are measured in the same run, docs/development.md §2).
//!
//! * [`workload`]: the prepared request stream (probe requests with known answers, hot or
//!   fresh for the cache) and the codec that writes it;
//! * [`noop`]: the no-op server; [`spawn`]: authzd started on a synthetic policy;
//! * [`drive`]: the closed-loop workers and their histograms; [`report`]: the output.
//!
//! See `docs/loadgen.md`.

pub mod answer;
pub mod drive;
pub mod noop;
pub mod report;
pub mod spawn;
pub mod workload;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use thiserror::Error;

use crate::config::parse_duration;
use crate::synth::Shape;
use drive::{drive, RunConfig, TargetStats};
use noop::NoopServer;
use report::{Outcome, Report, Settings, TargetReport};
use spawn::{Authzd, Started};
use workload::{Answers, StreamShape, Workload};

/// The longest measured window: the run always stops by itself.
pub const MAX_DURATION: Duration = Duration::from_secs(120);
pub const MAX_WARMUP: Duration = Duration::from_secs(60);
/// BatchAuthorize's own limit (src/api/limits.rs).
pub const MAX_BATCH_SIZE: usize = 1000;

#[derive(Debug, Error)]
pub enum LoadgenError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot prepare the workload: {0}")]
    Workload(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("cannot connect to `{target}`: {source}")]
    Connect {
        target: String,
        source: tonic::transport::Error,
    },
    #[error("cannot run authzd: {0}")]
    Spawn(String),
    #[error("no-op server: {0}")]
    Noop(String),
    #[error("histogram: {0}")]
    Histogram(String),
    #[error("cannot write the report: {0}")]
    Report(String),
    #[error("a worker failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl LoadgenError {
    /// 2 for usage errors, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            LoadgenError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Relative weights of the three RPCs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    pub authorize: u32,
    pub batch: u32,
    pub who_can: u32,
}

impl Mix {
    /// Indexed by [`workload::Kind`].
    pub fn weights(&self) -> [u32; 3] {
        [self.authorize, self.batch, self.who_can]
    }

    /// `authorize=90,batch=5,who-can=5`; a kind left out weighs 0.
    pub fn parse(s: &str) -> Result<Mix, String> {
        let mut mix = Mix {
            authorize: 0,
            batch: 0,
            who_can: 0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected NAME=WEIGHT"))?;
            let weight: u32 = weight
                .trim()
                .parse()
                .ok()
                .filter(|w| *w <= 1_000_000)
                .ok_or_else(|| format!("`{part}`: the weight must be 0..=1000000"))?;
            match name.trim() {
                "authorize" => mix.authorize = weight,
                "batch" => mix.batch = weight,
                "who-can" => mix.who_can = weight,
                other => {
                    return Err(format!(
                        "unknown kind `{other}` (use authorize, batch, who-can)"
                    ))
                }
            }
        }
        if mix.weights().iter().all(|w| *w == 0) {
            return Err("at least one weight must be positive".into());
        }
        Ok(mix)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "authorize={},batch={},who-can={}",
            self.authorize, self.batch, self.who_can
        )
    }
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("`{s}`: expected a number from 0 to 1"))
}

/// Load generator for authzd: the same load against authzd and against a no-op gRPC server,
/// side by side (loopback only).
#[derive(Debug, Parser)]
#[command(name = "authzd-loadgen", version)]
pub struct Args {
    /// An already running authzd on loopback: `http://127.0.0.1:PORT`, or `unix:PATH` with
    /// --unix. It must serve the synthetic policy of --bindings (see --write-policy).
    #[arg(long, value_name = "URL", conflicts_with = "spawn")]
    pub target: Option<String>,

    /// Write the synthetic policy to a temporary directory and start `authzd serve` on it
    /// (the default without --target). The binary: AUTHZD_BIN, else `authzd` next to this one.
    #[arg(long)]
    pub spawn: bool,

    /// Compare against this already running authzd instead of the no-op server (reported in
    /// the no-op's place): rounds alternate it and the target under the same load, so two
    /// deployments of authzd are measured side by side (e.g. etcd mode against directory
    /// mode, both serving the synthetic policy of --bindings).
    #[arg(long, value_name = "URL")]
    pub baseline: Option<String>,

    /// Bindings of the synthetic policy (`synth::Shape::with_bindings`).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub bindings: usize,

    /// Seed of the synthetic policy.
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,

    /// Requests in flight: this many workers, each sending its next request when the last
    /// is answered.
    #[arg(long, value_name = "C", default_value_t = 64)]
    pub concurrency: usize,

    /// HTTP/2 connections; requests go round-robin over them.
    #[arg(long, value_name = "K", default_value_t = 4)]
    pub connections: usize,

    /// Measured window per target (at most 120s).
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Unmeasured warm-up per target and round, before its part of the window (at most 60s).
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// The window is split into this many rounds (1..=10), alternating no-op and authzd (the
    /// no-op first), so that the machine's speed drifting during the run weighs on both alike.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: u32,

    /// Relative weights of the RPCs; a kind left out weighs 0.
    #[arg(long, value_name = "WEIGHTS", default_value = "authorize=90,batch=5,who-can=5", value_parser = Mix::parse)]
    pub mix: Mix,

    /// Requests per BatchAuthorize (1..=1000).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub batch_size: usize,

    /// Fraction of requests drawn from a small hot set (cache hits after their first
    /// answer); the rest carry a never-repeated resource name, so they miss.
    #[arg(long, value_name = "R", default_value = "0.5", value_parser = parse_ratio)]
    pub cache_hit_ratio: f64,

    /// Every Authorize (alone and in batches) carries a `content` of about this many bytes
    /// per object (an update: object and stored object), which the synthetic policy's rules
    /// never read; both targets decode it (0: no content).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub content_bytes: usize,

    /// authzd's `--cache-size` (with --spawn; default: authzd's own).
    #[arg(long, value_name = "N")]
    pub cache_size: Option<usize>,

    /// Use Unix domain sockets: the no-op server listens on PATH, a spawned authzd is asked
    /// to listen on `unix://PATH.authzd`.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Only write the synthetic policy of --bindings into DIR (for running authzd by hand
    /// and using --target), then exit.
    #[arg(long, value_name = "DIR")]
    pub write_policy: Option<PathBuf>,

    /// Only run the no-op server (on 127.0.0.1, or on --unix PATH), print its endpoint and
    /// serve until killed: the no-op as a process of its own, for profiling it the way authzd
    /// is profiled (`scripts/profile.sh`).
    #[arg(long, conflicts_with_all = ["target", "spawn", "write_policy"])]
    pub serve_noop: bool,
}

impl Args {
    fn validate(&self) -> Result<(), LoadgenError> {
        let usage = |m: &str| Err(LoadgenError::Usage(m.to_string()));
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return usage("--duration must be more than 0 and at most 120s");
        }
        if self.warmup > MAX_WARMUP {
            return usage("--warmup must be at most 60s");
        }
        if !(1..=10).contains(&self.rounds) {
            return usage("--rounds must be 1..=10");
        }
        if !(1..=4096).contains(&self.concurrency) {
            return usage("--concurrency must be 1..=4096");
        }
        if !(1..=256).contains(&self.connections) {
            return usage("--connections must be 1..=256");
        }
        if !(1..=MAX_BATCH_SIZE).contains(&self.batch_size) {
            return usage("--batch-size must be 1..=1000");
        }
        if !(1..=1_000_000).contains(&self.bindings) {
            return usage("--bindings must be 1..=1000000");
        }
        if self.target.is_some() && self.cache_size.is_some() {
            return usage("--cache-size applies only to a spawned authzd");
        }
        if let Some(target) = &self.target {
            check_target(target, self.unix.is_some())?;
        }
        Ok(())
    }
}

/// Loopback only: `http://` to a loopback address or `localhost`, or `unix:` with --unix.
fn check_target(target: &str, unix: bool) -> Result<(), LoadgenError> {
    let usage = |m: String| Err(LoadgenError::Usage(m));
    if target.starts_with("unix:") {
        return if unix {
            Ok(())
        } else {
            usage(format!(
                "`{target}` is a Unix socket: add --unix PATH for the no-op server"
            ))
        };
    }
    if unix {
        return usage("with --unix, --target must be `unix:PATH`".into());
    }
    let uri: tonic::codegen::http::Uri = target
        .parse()
        .map_err(|e| LoadgenError::Usage(format!("--target `{target}`: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return usage(format!(
            "--target `{target}`: use http:// (plaintext, loopback)"
        ));
    }
    let host = uri.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback || uri.port_u16().is_none() {
        return usage(format!(
            "--target `{target}`: must be a loopback address with a port (this tool never \
             leaves the machine)"
        ));
    }
    Ok(())
}

/// `--write-policy DIR`.
pub fn write_policy(args: &Args, dir: &Path) -> Result<PathBuf, LoadgenError> {
    std::fs::create_dir_all(dir).map_err(|source| LoadgenError::Io {
        what: format!("cannot create `{}`", dir.display()),
        source,
    })?;
    spawn::write_policy(dir, &Shape::with_bindings(args.bindings), args.seed)
}

/// Where a spawned authzd is asked to listen with `--unix PATH`.
fn authzd_socket(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".authzd");
    PathBuf::from(name)
}

/// The authzd side of a run.
enum AuthzdTarget {
    Spawned(Authzd),
    External(String),
    Unsupported(String),
}

/// Runs both targets and reports. Progress goes to stderr.
pub async fn run(args: &Args) -> Result<Report, LoadgenError> {
    args.validate()?;
    let shape = Shape::with_bindings(args.bindings);
    let workload = Arc::new(Workload::build(
        &shape,
        &StreamShape {
            workers: args.concurrency,
            mix: args.mix,
            batch_size: args.batch_size,
            cache_hit_ratio: args.cache_hit_ratio,
            content_bytes: args.content_bytes,
        },
    )?);
    let config = RunConfig {
        concurrency: args.concurrency,
        connections: args.connections,
        warmup: args.warmup,
        duration: args.duration / args.rounds,
        round: 0,
    };

    // authzd first: a spawned one compiles its policy before anything is timed.
    let authzd = match &args.target {
        Some(target) => AuthzdTarget::External(target.clone()),
        None => {
            let bin = spawn::authzd_binary()?;
            let listen = match &args.unix {
                Some(path) => {
                    let socket = authzd_socket(path);
                    if socket.exists() {
                        return Err(LoadgenError::Usage(format!(
                            "`{}` already exists; remove it or choose another --unix path",
                            socket.display()
                        )));
                    }
                    spawn::Listen::Unix(socket)
                }
                None => spawn::Listen::Tcp,
            };
            eprintln!(
                "authzd-loadgen: starting {} on a synthetic policy of {} bindings",
                bin.display(),
                args.bindings
            );
            let (seed, cache_size) = (args.seed, args.cache_size);
            let started = tokio::task::spawn_blocking(move || {
                Authzd::start(&bin, &listen, &shape, seed, cache_size)
            })
            .await??;
            match started {
                Started::Running(mut authzd) => {
                    authzd.wait_serving().await?;
                    AuthzdTarget::Spawned(authzd)
                }
                Started::Unsupported(why) => AuthzdTarget::Unsupported(why),
            }
        }
    };

    // The comparison: the no-op server, or another authzd (--baseline), which answers for real.
    let (noop, baseline_answers) = match &args.baseline {
        Some(_) => (None, Answers::Real),
        None => (
            Some(NoopServer::start(match &args.unix {
                Some(path) => noop::Listen::Unix(path.clone()),
                None => noop::Listen::Tcp,
            })?),
            Answers::Empty,
        ),
    };
    let (baseline_name, baseline_endpoint) = match (&args.baseline, &noop) {
        (Some(url), _) => ("baseline", url.clone()),
        (None, Some(noop)) => ("no-op", noop.endpoint().to_string()),
        (None, None) => return Err(LoadgenError::Usage("no comparison target".into())),
    };
    let endpoint = match &authzd {
        AuthzdTarget::Spawned(spawned) => Ok(spawned.endpoint.as_str()),
        AuthzdTarget::External(target) => Ok(target.as_str()),
        AuthzdTarget::Unsupported(why) => Err(why),
    };
    let announce = |round: u32, name: &str, endpoint: &str| {
        eprintln!(
            "authzd-loadgen: round {round}/{}: {name} at {endpoint}: warm-up {:?}, then {:?}",
            args.rounds, config.warmup, config.duration
        );
    };
    let (mut noop_stats, mut authzd_stats) = (None, None);
    for round in 1..=args.rounds {
        let config = RunConfig {
            round: round - 1,
            ..config
        };
        announce(round, baseline_name, &baseline_endpoint);
        let stats = drive(
            &baseline_endpoint,
            Arc::clone(&workload),
            baseline_answers,
            config,
        )
        .await?;
        add_round(&mut noop_stats, stats)?;
        if let Ok(endpoint) = endpoint {
            announce(round, "authzd", endpoint);
            let stats = drive(endpoint, Arc::clone(&workload), Answers::Real, config).await?;
            add_round(&mut authzd_stats, stats)?;
        }
    }
    if let Some(noop) = noop {
        noop.stop()?;
    }
    let measured = |stats: Option<TargetStats>| -> Result<Outcome, LoadgenError> {
        let stats = stats.ok_or_else(|| LoadgenError::Usage("no round was run".into()))?;
        Ok(Outcome::Measured(Box::new(TargetReport::of(&stats)?)))
    };
    let noop_outcome = measured(noop_stats)?;
    let authzd_outcome = match endpoint {
        Ok(_) => measured(authzd_stats)?,
        Err(why) => {
            let unsupported = format!("authzd does not listen on Unix sockets yet ({why})");
            eprintln!("authzd-loadgen: {unsupported}");
            Outcome::Unsupported { unsupported }
        }
    };
    drop(authzd);

    let settings = Settings {
        target: args
            .target
            .clone()
            .unwrap_or_else(|| "spawned authzd".into()),
        transport: if args.unix.is_some() { "unix" } else { "tcp" },
        bindings: args.bindings,
        concurrency: args.concurrency,
        connections: args.connections,
        warmup_s: args.warmup.as_secs_f64(),
        duration_s: args.duration.as_secs_f64(),
        rounds: args.rounds,
        mix: args.mix.to_string(),
        batch_size: args.batch_size,
        cache_hit_ratio: args.cache_hit_ratio,
        content_bytes: args.content_bytes,
        cache_size: args.cache_size,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        baseline: args.baseline.clone(),
    };
    Ok(Report::new(settings, noop_outcome, authzd_outcome))
}

/// Adds one round's stats to a target's total.
fn add_round(total: &mut Option<TargetStats>, round: TargetStats) -> Result<(), LoadgenError> {
    match total {
        Some(total) => total.add_round(&round),
        None => {
            *total = Some(round);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn mix_parses_and_prints() {
        let mix = Mix::parse("authorize=90,batch=5,who-can=5").unwrap();
        assert_eq!(mix.weights(), [90, 5, 5]);
        assert_eq!(mix.to_string(), "authorize=90,batch=5,who-can=5");
        assert_eq!(Mix::parse("batch=1").unwrap().weights(), [0, 1, 0]);
        assert!(Mix::parse("authorize=0").is_err());
        assert!(Mix::parse("nope=1").is_err());
        assert!(Mix::parse("authorize").is_err());
    }

    #[test]
    fn targets_are_loopback_only() {
        assert!(check_target("http://127.0.0.1:50051", false).is_ok());
        assert!(check_target("http://localhost:50051", false).is_ok());
        assert!(check_target("http://[::1]:50051", false).is_ok());
        assert!(check_target("http://10.0.0.1:50051", false).is_err());
        assert!(check_target("http://example.com:50051", false).is_err());
        assert!(check_target("https://127.0.0.1:50051", false).is_err());
        assert!(check_target("http://127.0.0.1", false).is_err());
        assert!(check_target("unix:/tmp/a.sock", true).is_ok());
        assert!(check_target("unix:/tmp/a.sock", false).is_err());
        assert!(check_target("http://127.0.0.1:1", true).is_err());
    }

    #[test]
    fn limits_are_usage_errors() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["authzd-loadgen"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).unwrap().validate()
        };
        assert!(parse(&[]).is_ok());
        assert!(matches!(
            parse(&["--duration", "121s"]),
            Err(LoadgenError::Usage(_))
        ));
        assert!(parse(&["--batch-size", "1001"]).is_err());
        assert!(parse(&["--rounds", "0"]).is_err());
        assert!(parse(&["--rounds", "11"]).is_err());
        assert!(parse(&["--rounds", "1"]).is_ok());
        assert!(parse(&["--target", "http://127.0.0.1:1", "--cache-size", "5"]).is_err());
        assert!(Args::try_parse_from(["authzd-loadgen", "--cache-hit-ratio", "1.5"]).is_err());
        assert!(Args::try_parse_from([
            "authzd-loadgen",
            "--spawn",
            "--target",
            "http://127.0.0.1:1"
        ])
        .is_err());
    }
}
