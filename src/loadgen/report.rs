//! What a run printed: per target and kind, throughput and latency percentiles; then the
//! ratios authzd ÷ no-op. Human-readable, or one JSON object (`--json`).

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::drive::{histogram, KindStats, TargetStats};
use super::workload::Kind;
use super::LoadgenError;

#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        Latency {
            p50_us: h.value_at_quantile(0.50),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct KindReport {
    /// Calls answered correctly within the window.
    pub requests: u64,
    pub requests_per_s: f64,
    /// Decisions carried per second (= requests/s except for batches).
    pub decisions_per_s: f64,
    /// Failed calls and wrong answers, warm-up included.
    pub errors: u64,
    pub latency: Latency,
}

impl KindReport {
    fn of(stats: &KindStats, window_s: f64) -> Self {
        let requests = stats.latency.len();
        KindReport {
            requests,
            requests_per_s: per_second(requests, window_s),
            decisions_per_s: per_second(stats.decisions, window_s),
            errors: stats.errors,
            latency: Latency::of(&stats.latency),
        }
    }
}

fn per_second(n: u64, window_s: f64) -> f64 {
    if window_s > 0.0 {
        n as f64 / window_s
    } else {
        0.0
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TargetReport {
    pub endpoint: String,
    pub window_s: f64,
    /// Every kind together.
    pub all: KindReport,
    pub authorize: KindReport,
    pub batch: KindReport,
    pub who_can: KindReport,
    /// Fraction of decisions answered from authzd's cache (`cached` in the answers).
    pub cached_decisions: f64,
    pub error_samples: Vec<String>,
}

impl TargetReport {
    pub fn of(stats: &TargetStats) -> Result<Self, LoadgenError> {
        let window_s = stats.window.as_secs_f64();
        let mut all = KindStats {
            latency: histogram()?,
            decisions: 0,
            cached: 0,
            errors: 0,
        };
        for kind in &stats.kinds {
            all.latency
                .add(&kind.latency)
                .map_err(|e| LoadgenError::Histogram(format!("{e:?}")))?;
            all.decisions += kind.decisions;
            all.cached += kind.cached;
            all.errors += kind.errors;
        }
        let kind = |k: Kind| KindReport::of(stats.kind(k), window_s);
        Ok(TargetReport {
            endpoint: stats.endpoint.clone(),
            window_s,
            authorize: kind(Kind::Authorize),
            batch: kind(Kind::Batch),
            who_can: kind(Kind::WhoCan),
            cached_decisions: if all.decisions > 0 {
                all.cached as f64 / all.decisions as f64
            } else {
                0.0
            },
            all: KindReport::of(&all, window_s),
            error_samples: stats.error_samples.clone(),
        })
    }

    fn kinds(&self) -> [(&'static str, &KindReport); 4] {
        [
            (Kind::Authorize.name(), &self.authorize),
            (Kind::Batch.name(), &self.batch),
            (Kind::WhoCan.name(), &self.who_can),
            ("all", &self.all),
        ]
    }
}

/// A target's outcome: measured, or not measurable on this transport.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Outcome {
    Measured(Box<TargetReport>),
    Unsupported { unsupported: String },
}

impl Outcome {
    fn measured(&self) -> Option<&TargetReport> {
        match self {
            Outcome::Measured(report) => Some(report),
            Outcome::Unsupported { .. } => None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Targets {
    pub noop: Outcome,
    pub authzd: Outcome,
}

/// authzd ÷ no-op; `None` where the no-op figure is zero (the kind was not in the mix).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub throughput: Option<f64>,
    pub p99: Option<f64>,
}

impl Ratio {
    fn of(authzd: &KindReport, noop: &KindReport) -> Self {
        let ratio = |a: f64, n: f64| (n > 0.0 && a > 0.0).then(|| a / n);
        Ratio {
            throughput: ratio(authzd.requests_per_s, noop.requests_per_s),
            p99: ratio(authzd.latency.p99_us as f64, noop.latency.p99_us as f64),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratios {
    pub all: Ratio,
    pub authorize: Ratio,
    pub batch: Ratio,
    pub who_can: Ratio,
}

/// The run's settings, echoed so a figure can be reproduced.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub target: String,
    pub transport: &'static str,
    pub bindings: usize,
    pub concurrency: usize,
    pub connections: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// The window was split into this many rounds, alternating the two targets.
    pub rounds: u32,
    pub mix: String,
    pub batch_size: usize,
    pub cache_hit_ratio: f64,
    /// Bytes of content per object on every Authorize (0: none).
    pub content_bytes: usize,
    pub cache_size: Option<usize>,
    pub cores: usize,
    /// `--baseline`: the authzd measured in the no-op's place (`targets.noop`), if any.
    pub baseline: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub settings: Settings,
    pub targets: Targets,
    /// authzd ÷ no-op, when both were measured.
    pub ratios: Option<Ratios>,
}

impl Report {
    /// What authzd was compared with: the no-op server, or `--baseline`.
    fn baseline_name(&self) -> &'static str {
        if self.settings.baseline.is_some() {
            "baseline"
        } else {
            "no-op"
        }
    }

    pub fn new(settings: Settings, noop: Outcome, authzd: Outcome) -> Self {
        let ratios = match (authzd.measured(), noop.measured()) {
            (Some(a), Some(n)) => Some(Ratios {
                all: Ratio::of(&a.all, &n.all),
                authorize: Ratio::of(&a.authorize, &n.authorize),
                batch: Ratio::of(&a.batch, &n.batch),
                who_can: Ratio::of(&a.who_can, &n.who_can),
            }),
            _ => None,
        };
        Report {
            settings,
            targets: Targets { noop, authzd },
            ratios,
        }
    }

    /// Errors over both targets; non-zero makes the exit code 1.
    pub fn errors(&self) -> u64 {
        [&self.targets.noop, &self.targets.authzd]
            .into_iter()
            .filter_map(Outcome::measured)
            .map(|t| t.all.errors)
            .sum()
    }

    pub fn to_json(&self) -> Result<String, LoadgenError> {
        serde_json::to_string_pretty(self).map_err(|e| LoadgenError::Report(e.to_string()))
    }

    pub fn to_text(&self) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "authzd-loadgen: {} ({}), {} bindings, concurrency {}, connections {}, warm-up {:.1}s, \
             window {:.1}s in {} alternating rounds, mix {}, batch size {}, cache-hit-ratio {}, \
             content {} bytes, {} cores",
            s.target,
            s.transport,
            s.bindings,
            s.concurrency,
            s.connections,
            s.warmup_s,
            s.duration_s,
            s.rounds,
            s.mix,
            s.batch_size,
            s.cache_hit_ratio,
            s.content_bytes,
            s.cores
        );
        let _ = writeln!(
            out,
            "\n{:<7} {:<9} {:>9} {:>10} {:>12} {:>8} {:>8} {:>8} {:>7}",
            "target",
            "kind",
            "requests",
            "req/s",
            "decisions/s",
            "p50 µs",
            "p99 µs",
            "p999 µs",
            "errors"
        );
        for (name, outcome) in [
            (self.baseline_name(), &self.targets.noop),
            ("authzd", &self.targets.authzd),
        ] {
            match outcome {
                Outcome::Unsupported { unsupported } => {
                    let _ = writeln!(out, "{name:<7} unsupported: {unsupported}");
                }
                Outcome::Measured(t) => {
                    for (kind, k) in t.kinds() {
                        let _ = writeln!(
                            out,
                            "{name:<7} {kind:<9} {:>9} {:>10.0} {:>12.0} {:>8} {:>8} {:>8} {:>7}",
                            k.requests,
                            k.requests_per_s,
                            k.decisions_per_s,
                            k.latency.p50_us,
                            k.latency.p99_us,
                            k.latency.p999_us,
                            k.errors
                        );
                    }
                }
            }
        }
        if let Some(a) = self.targets.authzd.measured() {
            let _ = writeln!(
                out,
                "\nauthzd answered {:.1}% of its decisions from its cache",
                a.cached_decisions * 100.0
            );
        }
        if let Some(r) = &self.ratios {
            let _ = writeln!(
                out,
                "\n{:<16} {:>10} {:>6}",
                format!("authzd ÷ {}", self.baseline_name()),
                "throughput",
                "p99"
            );
            let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
            for (kind, ratio) in [
                (Kind::Authorize.name(), &r.authorize),
                (Kind::Batch.name(), &r.batch),
                (Kind::WhoCan.name(), &r.who_can),
                ("all", &r.all),
            ] {
                let _ = writeln!(
                    out,
                    "{kind:<16} {:>10} {:>6}",
                    show(ratio.throughput),
                    show(ratio.p99)
                );
            }
        }
        for (name, outcome) in [
            (self.baseline_name(), &self.targets.noop),
            ("authzd", &self.targets.authzd),
        ] {
            if let Some(t) = outcome.measured() {
                for sample in &t.error_samples {
                    let _ = writeln!(out, "{name} error: {sample}");
                }
            }
        }
        out
    }
}
