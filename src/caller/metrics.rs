//! The local cache's figures ([`LocalFigures`]) in the Prometheus text exposition format
//! (version 0.0.4), for a program that links the library and serves its own `/metrics`.
//!
//! Written by hand rather than through a `metrics` recorder: the figures are counters the
//! cache already keeps, read at scrape time (as the server's own `/metrics` reads its cache),
//! and a library must not install or require a global recorder in its caller's process.

use std::fmt::Write as _;

use super::local::LocalFigures;

/// A sample's value: counts are written exactly, seconds as a float.
enum Value {
    Count(u64),
    Seconds(f64),
}

impl LocalFigures {
    /// Appends the figures to `out`, each series with its `# HELP` and `# TYPE` lines:
    /// `authzd_client_local_cache_{hits,misses,fenced_requests,invalidations_applied,
    /// entries_invalidated,fenced_seconds}_total` (counters) and
    /// `authzd_client_local_cache_{entries,fresh,applied_revision}` (gauges).
    pub fn render_prometheus(&self, out: &mut String) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        for (name, kind, help, value) in self.series() {
            let _ = writeln!(out, "# HELP authzd_client_local_cache_{name} {help}");
            let _ = writeln!(out, "# TYPE authzd_client_local_cache_{name} {kind}");
            let _ = match value {
                Value::Count(count) => writeln!(out, "authzd_client_local_cache_{name} {count}"),
                Value::Seconds(seconds) => {
                    writeln!(out, "authzd_client_local_cache_{name} {seconds}")
                }
            };
        }
    }

    fn series(&self) -> [(&'static str, &'static str, &'static str, Value); 9] {
        [
            (
                "entries",
                "gauge",
                "Answers kept in this process's decision cache.",
                Value::Count(self.entries),
            ),
            (
                "hits_total",
                "counter",
                "Authorize answered from this process's memory.",
                Value::Count(self.hits),
            ),
            (
                "misses_total",
                "counter",
                "Authorize asked of the server while the cache held a proof (the answer kept when cacheable).",
                Value::Count(self.misses),
            ),
            (
                "fenced_requests_total",
                "counter",
                "Authorize asked of the server because the cache held no proof of being current.",
                Value::Count(self.fenced_requests),
            ),
            (
                "invalidations_applied_total",
                "counter",
                "Invalidations received from the server's stream and applied.",
                Value::Count(self.invalidations_applied),
            ),
            (
                "entries_invalidated_total",
                "counter",
                "Cached answers those invalidations removed.",
                Value::Count(self.entries_invalidated),
            ),
            (
                "fenced_seconds_total",
                "counter",
                "Time the cache has spent without a proof of being current (answering nothing from memory).",
                Value::Seconds(self.fenced_time.as_secs_f64()),
            ),
            (
                "fresh",
                "gauge",
                "1 while the cache holds a proof of being current (answers from memory), else 0.",
                Value::Count(u64::from(self.fresh)),
            ),
            (
                "applied_revision",
                "gauge",
                "The server's policy revision whose invalidation the cache applied last.",
                Value::Count(self.applied_revision),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::caller::local::{LocalCache, LocalCacheConfig};
    use crate::policy::impact::Impact;

    /// `name value` lines; every line is a comment or a sample.
    fn samples(text: &str) -> Vec<(&str, &str)> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| line.split_once(' ').expect("a sample line"))
            .collect()
    }

    #[test]
    fn every_figure_is_a_series_with_help_and_type() {
        let figures = LocalFigures {
            entries: 3,
            hits: 40,
            misses: 5,
            fenced_requests: 2,
            invalidations_applied: 7,
            entries_invalidated: 4,
            fenced_time: Duration::from_millis(1500),
            fresh: true,
            applied_revision: 12,
        };
        let mut text = "other_series 1".to_string();
        figures.render_prometheus(&mut text);
        assert!(text.starts_with("other_series 1\n# HELP "), "{text}");
        assert_eq!(
            samples(&text),
            [
                ("other_series", "1"),
                ("authzd_client_local_cache_entries", "3"),
                ("authzd_client_local_cache_hits_total", "40"),
                ("authzd_client_local_cache_misses_total", "5"),
                ("authzd_client_local_cache_fenced_requests_total", "2"),
                ("authzd_client_local_cache_invalidations_applied_total", "7"),
                ("authzd_client_local_cache_entries_invalidated_total", "4"),
                ("authzd_client_local_cache_fenced_seconds_total", "1.5"),
                ("authzd_client_local_cache_fresh", "1"),
                ("authzd_client_local_cache_applied_revision", "12"),
            ]
        );
        assert!(
            text.contains(
                "# TYPE authzd_client_local_cache_hits_total counter\n\
                 authzd_client_local_cache_hits_total 40\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE authzd_client_local_cache_fresh gauge\n"),
            "{text}"
        );
        for (name, _) in samples(&text).into_iter().skip(1) {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        }
        assert!(text.ends_with('\n'));
    }

    /// What a real cache counted, as it counted it.
    #[test]
    fn a_caches_figures_as_they_are() {
        let local = LocalCache::new(LocalCacheConfig::new("m"));
        let mut text = String::new();
        local.figures().render_prometheus(&mut text);
        assert!(
            text.contains("\nauthzd_client_local_cache_fresh 0\n"),
            "{text}"
        );
        local.apply(1, 9, &Impact::everything());
        local.renew(Instant::now() + Duration::from_secs(60));
        let mut text = String::new();
        local.figures().render_prometheus(&mut text);
        let samples = samples(&text);
        for (series, value) in [
            ("authzd_client_local_cache_fresh", "1"),
            ("authzd_client_local_cache_applied_revision", "9"),
            ("authzd_client_local_cache_invalidations_applied_total", "1"),
        ] {
            assert!(
                samples.contains(&(series, value)),
                "{series} {value} in\n{text}"
            );
        }
    }
}
