//! Prometheus metrics in text exposition format, without a metrics crate:
//! a few labelled counters, gauges and histograms on atomics.
//!
//! Requests, active streams and runs are counted by the HTTP layer and the
//! run manager; node, model and tool figures are read off each run's events
//! (`observe_event`), so they cost nothing on the executor's hot path.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::events::{Event, EventKind, LlmFinish, ToolFault, ToolReturn};

const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Fine buckets for the token delay (a target of 1 ms at p99), up to
/// seconds so that a queue under load still has a quantile, not `+Inf`.
const FINE_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

#[derive(Default)]
struct Histogram {
    limits: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self::with(BUCKETS)
    }

    fn with(limits: &'static [f64]) -> Self {
        Self {
            limits,
            buckets: limits.iter().map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        }
    }

    fn observe(&self, seconds: f64) {
        for (b, limit) in self.buckets.iter().zip(self.limits) {
            if seconds <= *limit {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }
}

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Family<T> {
    series: Mutex<BTreeMap<Labels, Arc<T>>>,
}

impl<T: Default> Family<T> {
    fn get(&self, labels: Labels, make: impl FnOnce() -> T) -> Arc<T> {
        let mut s = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(s.entry(labels).or_insert_with(|| Arc::new(make())))
    }

    fn snapshot(&self) -> Vec<(Labels, Arc<T>)> {
        self.series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(l, v)| (l.clone(), Arc::clone(v)))
            .collect()
    }
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    requests: Family<AtomicU64>,
    request_seconds: Family<Histogram>,
    /// Open SSE streams.
    pub active_streams: AtomicI64,
    /// Runs executing.
    pub active_runs: AtomicI64,
    runs: Family<AtomicU64>,
    node_seconds: Family<Histogram>,
    llm_seconds: Family<Histogram>,
    tokens: Family<AtomicU64>,
    /// Model cost by graph, in billionths of a US dollar.
    cost: Family<AtomicU64>,
    tool_calls: Family<AtomicU64>,
    token_delay: Family<Histogram>,
    first_visible: Family<Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn label_text(labels: &Labels) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}=\"{}\"",
                v.replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n")
            )
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

impl Metrics {
    /// Counts a request.
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let labels = vec![
            ("method", method.to_owned()),
            ("route", route.to_owned()),
            ("status", status.to_string()),
        ];
        self.requests
            .get(labels, Default::default)
            .fetch_add(1, Ordering::Relaxed);
        self.request_seconds
            .get(vec![("route", route.to_owned())], Histogram::new)
            .observe(seconds);
    }

    /// Counts a finished run.
    pub fn run_finished(&self, graph: &str, outcome: &str) {
        self.runs
            .get(
                vec![("graph", graph.to_owned()), ("outcome", outcome.to_owned())],
                Default::default,
            )
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Records how long a streamed token took from the model to the client
    /// stream (event timestamp → SSE bytes handed to the connection).
    pub fn token_delay(&self, seconds: f64) {
        self.token_delay
            .get(Vec::new(), || Histogram::with(FINE_BUCKETS))
            .observe(seconds);
    }

    /// Updates node, model and tool figures from one event of `graph`.
    pub fn observe_event(&self, graph: &str, ev: &Event) {
        let node = ev.node.as_deref().unwrap_or("");
        match &ev.event {
            EventKind::NodeFinished { duration_us, .. } => self
                .node_seconds
                .get(
                    vec![("graph", graph.to_owned()), ("node", node.to_owned())],
                    Histogram::new,
                )
                .observe(*duration_us as f64 / 1e6),
            EventKind::LlmFinished(llm_finish) => {
                let LlmFinish {
                    usage, duration_us, ..
                } = &**llm_finish;
                self.llm_seconds
                    .get(
                        vec![("graph", graph.to_owned()), ("node", node.to_owned())],
                        Histogram::new,
                    )
                    .observe(*duration_us as f64 / 1e6);
                if usage.cost_nano_usd > 0 {
                    self.cost
                        .get(vec![("graph", graph.to_owned())], Default::default)
                        .fetch_add(usage.cost_nano_usd, Ordering::Relaxed);
                }
                for (kind, n) in [
                    ("prompt", usage.prompt_tokens),
                    ("completion", usage.completion_tokens),
                ] {
                    self.tokens
                        .get(
                            vec![("graph", graph.to_owned()), ("kind", kind.to_owned())],
                            Default::default,
                        )
                        .fetch_add(n, Ordering::Relaxed);
                }
            }
            EventKind::ToolResult(tool_return) => {
                let ToolReturn { tool, cached, .. } = &**tool_return;
                let outcome = if *cached { "cached" } else { "ok" };
                self.tool_calls
                    .get(
                        vec![("tool", tool.clone()), ("outcome", outcome.to_owned())],
                        Default::default,
                    )
                    .fetch_add(1, Ordering::Relaxed);
            }
            EventKind::ToolError(tool_fault) => {
                let ToolFault { tool, error, .. } = &**tool_fault;
                self.tool_calls
                    .get(
                        vec![("tool", tool.clone()), ("outcome", error.kind.clone())],
                        Default::default,
                    )
                    .fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Time from `run_started` to the first part a client saw.
    pub fn first_visible(&self, graph: &str, seconds: f64) {
        self.first_visible
            .get(vec![("graph", graph.to_owned())], Histogram::new)
            .observe(seconds);
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_counters(&mut out);
        self.render_gauges(&mut out);
        self.render_histograms(&mut out);
        out
    }

    /// Requests, runs, tokens, tool calls and cost.
    fn render_counters(&self, out: &mut String) {
        let counters: [(&str, &str, &Family<AtomicU64>); 4] = [
            (
                "stategraph_http_requests_total",
                "HTTP requests by method, route and status.",
                &self.requests,
            ),
            (
                "stategraph_runs_total",
                "Finished runs by graph and outcome.",
                &self.runs,
            ),
            (
                "stategraph_llm_tokens_total",
                "Model tokens by graph and kind.",
                &self.tokens,
            ),
            (
                "stategraph_tool_calls_total",
                "Tool calls by tool and outcome.",
                &self.tool_calls,
            ),
        ];
        for (name, help, fam) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in fam.snapshot() {
                let _ = writeln!(
                    out,
                    "{name}{} {}",
                    label_text(&labels),
                    v.load(Ordering::Relaxed)
                );
            }
        }
        let name = "stategraph_llm_cost_usd_total";
        let _ = writeln!(
            out,
            "# HELP {name} Model cost by graph in US dollars, at the configured prices.\n# TYPE {name} counter"
        );
        for (labels, v) in self.cost.snapshot() {
            let dollars = v.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}{} {dollars}", label_text(&labels));
        }
    }

    /// Open streams and runs, and memory handed back.
    fn render_gauges(&self, out: &mut String) {
        for (name, help, v) in [
            (
                "stategraph_active_streams",
                "Open SSE streams.",
                &self.active_streams,
            ),
            (
                "stategraph_active_runs",
                "Runs executing.",
                &self.active_runs,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let name = "stategraph_memory_releases_total";
        let _ = writeln!(
            out,
            "# HELP {name} Times the process went quiet and handed free memory back to the OS.\n\
             # TYPE {name} counter\n{name} {}",
            crate::memory::requests()
        );
    }

    /// The latency histograms.
    fn render_histograms(&self, out: &mut String) {
        let histograms: [(&str, &str, &Family<Histogram>); 5] = [
            (
                "stategraph_first_visible_seconds",
                "Time from a run's start to the first part its client sees.",
                &self.first_visible,
            ),
            (
                "stategraph_sse_token_delay_seconds",
                "Time from a model token to its SSE bytes (live streams).",
                &self.token_delay,
            ),
            (
                "stategraph_http_request_duration_seconds",
                "HTTP request latency (to headers for streams).",
                &self.request_seconds,
            ),
            (
                "stategraph_node_duration_seconds",
                "Node execution time.",
                &self.node_seconds,
            ),
            (
                "stategraph_llm_call_duration_seconds",
                "Model call time.",
                &self.llm_seconds,
            ),
        ];
        for (name, help, fam) in histograms {
            histogram(out, name, help, fam);
        }
    }
}

/// One histogram family in the exposition format: each label set's
/// buckets, sum and count.
fn histogram(out: &mut String, name: &str, help: &str, fam: &Family<Histogram>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (labels, h) in fam.snapshot() {
        for (b, limit) in h.buckets.iter().zip(h.limits) {
            let mut l = labels.clone();
            l.push(("le", format!("{limit}")));
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                label_text(&l),
                b.load(Ordering::Relaxed)
            );
        }
        let mut l = labels.clone();
        l.push(("le", "+Inf".into()));
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{} {count}", label_text(&l));
        let _ = writeln!(
            out,
            "{name}_sum{} {}",
            label_text(&labels),
            h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{} {count}", label_text(&labels));
    }
}

impl crate::runs::RunObserver for Metrics {
    fn event(&self, graph: &str, event: &Event) {
        self.observe_event(graph, event);
    }

    fn finished(&self, graph: &str, outcome: &str) {
        self.run_finished(graph, outcome);
    }

    fn first_visible(&self, graph: &str, seconds: f64) {
        Metrics::first_visible(self, graph, seconds);
    }
}
