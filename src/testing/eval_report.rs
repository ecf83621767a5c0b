//! `stategraph eval`'s reports: per chat turn what changed, then a summary
//! table ("37 of 200 chats took another route; 5 now fail"); and the same
//! as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::eval::{RunEval, Side};

/// The counts of an evaluation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Summary {
    /// Runs evaluated.
    pub runs: usize,
    /// Distinct chats among them (a run without a chat counts as one).
    pub chats: usize,
    /// Runs where anything changed.
    pub changed: usize,
    /// Runs that took another route.
    pub route: usize,
    /// Runs that ran other nodes.
    pub nodes: usize,
    /// Runs that made other tool calls.
    pub tool_calls: usize,
    /// Runs with another answer.
    pub answer: usize,
    /// Runs that now fail (or could not run) where they did not.
    pub now_fail: usize,
    /// Tokens before and now.
    pub tokens: (u64, u64),
    /// Cost before and now, US dollars.
    pub cost_usd: (f64, f64),
    /// Model calls answered from recordings, and by the configured model.
    pub recorded_calls: u64,
    /// See `recorded_calls`.
    pub live_calls: u64,
    /// Judged criteria the judge passed (`--criterion`).
    pub judged_pass: usize,
    /// Judged criteria it failed, or could not judge.
    pub judged_fail: usize,
    /// Criteria not judged: no judge model.
    pub not_judged: usize,
}

/// The counts of `evals`.
pub(crate) fn summary(evals: &[RunEval]) -> Summary {
    let mut s = Summary {
        runs: evals.len(),
        ..Summary::default()
    };
    let mut chats: Vec<String> = evals
        .iter()
        .map(|e| e.chat.clone().unwrap_or_else(|| e.run.to_string()))
        .collect();
    chats.sort();
    chats.dedup();
    s.chats = chats.len();
    for e in evals {
        let c = &e.changes;
        s.changed += usize::from(c.any());
        s.route += usize::from(c.route);
        s.nodes += usize::from(c.nodes);
        s.tool_calls += usize::from(c.tool_calls);
        s.answer += usize::from(c.answer);
        s.now_fail += usize::from(e.now_fails());
        s.tokens.0 += e.before.tokens;
        s.cost_usd.0 += e.before.cost_usd;
        if let Some(a) = &e.after {
            s.tokens.1 += a.tokens;
            s.cost_usd.1 += a.cost_usd;
        }
        s.recorded_calls += u64::from(e.recorded_calls);
        s.live_calls += u64::from(e.live_calls);
        for j in &e.judged {
            match j.verdict {
                "pass" => s.judged_pass += 1,
                "skipped" => s.not_judged += 1,
                _ => s.judged_fail += 1,
            }
        }
    }
    s
}

/// The report for a terminal: each changed run (or every run with
/// `verbose`), then the summary.
pub(crate) fn text(evals: &[RunEval], elapsed: Duration, verbose: bool) -> String {
    let mut out = String::new();
    for e in evals {
        if e.compared {
            compared_run(&mut out, e, verbose);
        } else {
            uncompared_run(&mut out, e);
        }
    }
    summary_text(&mut out, &summary(evals), elapsed);
    out
}

/// An input from a file without a baseline: what it did now.
fn uncompared_run(out: &mut String, e: &RunEval) {
    let name = e.chat.as_deref().unwrap_or_default();
    match (&e.after, &e.error) {
        (Some(a), _) => {
            let _ = writeln!(
                out,
                "RAN {name} (graph {}): {} [{}] {}{}",
                e.graph,
                a.path.join(" → "),
                a.routes.join(", "),
                a.status,
                a.error
                    .as_deref()
                    .map(|x| format!(" ({})", one_line(x, 120)))
                    .unwrap_or_default()
            );
            let _ = writeln!(out, "  answer: {}", one_line(&a.answer, 160));
            judged(out, e);
        }
        (None, err) => {
            let _ = writeln!(
                out,
                "RAN {name} (graph {}): could not run: {}",
                e.graph,
                err.as_deref().unwrap_or("?")
            );
        }
    }
}

/// A stored run compared with its run now: what changed (everything with
/// `verbose`), the judged criteria, and the costs side by side.
fn compared_run(out: &mut String, e: &RunEval, verbose: bool) {
    let judged_fail = e.judged.iter().any(|j| j.failed());
    if !e.changes.any() && !judged_fail && !verbose {
        return;
    }
    let label = match &e.chat {
        Some(c) => format!("chat {c} · run {}", e.run),
        None => format!("run {}", e.run),
    };
    let what = if e.changes.any() {
        format!("CHANGED ({})", e.changes.names().join(", "))
    } else {
        "same".to_owned()
    };
    let _ = writeln!(out, "{what} {label} (graph {})", e.graph);
    if !e.input.is_empty() {
        let _ = writeln!(out, "  user: {}", one_line(&e.input, 100));
    }
    if let Some(err) = &e.error {
        let _ = writeln!(out, "  could not run: {err}");
        return;
    }
    let Some(a) = &e.after else { return };
    changes(out, e, &e.before, a);
    judged(out, e);
    let b = &e.before;
    let _ = writeln!(
        out,
        "  tokens {} → {} · cost ${:.4} → ${:.4} · latency {:.0} ms → {:.0} ms · model calls {} recorded, {} live",
        b.tokens,
        a.tokens,
        b.cost_usd,
        a.cost_usd,
        b.latency_ms,
        a.latency_ms,
        e.recorded_calls,
        e.live_calls
    );
}

/// Each change of a compared run, before and now.
fn changes(out: &mut String, e: &RunEval, b: &Side, a: &Side) {
    if e.changes.route {
        let _ = writeln!(
            out,
            "  route:  {}  →  {}",
            b.routes.join(", "),
            a.routes.join(", ")
        );
    }
    if e.changes.nodes {
        let _ = writeln!(out, "  before: {}", b.path.join(" → "));
        let _ = writeln!(out, "  now:    {}", a.path.join(" → "));
    }
    if e.changes.status {
        let _ = writeln!(
            out,
            "  status: {} → {}{}",
            b.status,
            a.status,
            a.error
                .as_deref()
                .map(|e| format!(" ({})", one_line(e, 120)))
                .unwrap_or_default()
        );
    }
    if e.changes.tool_calls {
        let _ = writeln!(out, "  tool calls before: {}", calls(b));
        let _ = writeln!(out, "  tool calls now:    {}", calls(a));
    }
    if let Some(d) = &e.answer_diff {
        let _ = writeln!(out, "  answer (- before, + now):");
        for l in d.lines().take(40) {
            let _ = writeln!(out, "    {l}");
        }
    }
}

/// The summary table that ends the report.
fn summary_text(out: &mut String, s: &Summary, elapsed: Duration) {
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", headline(s));
    let _ = writeln!(out, "  {:<28} {:>6}", "runs (chat turns)", s.runs);
    let _ = writeln!(out, "  {:<28} {:>6}", "chats", s.chats);
    for (k, v) in [
        ("changed", s.changed),
        ("took another route", s.route),
        ("ran other nodes", s.nodes),
        ("made other tool calls", s.tool_calls),
        ("answered otherwise", s.answer),
        ("now fail", s.now_fail),
    ] {
        let _ = writeln!(out, "  {k:<28} {v:>6}");
    }
    let _ = writeln!(out, "  {:<28} {:>6} → {}", "tokens", s.tokens.0, s.tokens.1);
    let _ = writeln!(
        out,
        "  {:<28} ${:.4} → ${:.4}",
        "cost", s.cost_usd.0, s.cost_usd.1
    );
    let _ = writeln!(
        out,
        "  {:<28} {} recorded, {} live",
        "model calls", s.recorded_calls, s.live_calls
    );
    if s.judged_pass + s.judged_fail + s.not_judged > 0 {
        let _ = writeln!(
            out,
            "  {:<28} {} pass, {} fail, {} not judged{}",
            "judged",
            s.judged_pass,
            s.judged_fail,
            s.not_judged,
            if s.not_judged > 0 {
                " (no judge model: --judge ROLE)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(out, "({} runs in {} ms)", s.runs, elapsed.as_millis());
}

/// A run's judged criteria: each verdict with its reason.
fn judged(out: &mut String, e: &RunEval) {
    for j in &e.judged {
        let mark = match j.verdict {
            "pass" => "✓",
            "skipped" => "-",
            _ => "✗",
        };
        let by = if j.judge.is_empty() {
            String::new()
        } else {
            format!(" (judged by {})", j.judge)
        };
        let _ = writeln!(
            out,
            "  {mark} judge {} “{}”: {}{by}",
            j.verdict, j.criterion, j.reason
        );
    }
}

/// "37 of 200 chats took another route; 5 now fail".
pub(crate) fn headline(s: &Summary) -> String {
    format!(
        "{} of {} chat turns took another route; {} now fail; {} changed in all",
        s.route, s.runs, s.now_fail, s.changed
    )
}

fn calls(s: &Side) -> String {
    if s.tool_calls.is_empty() {
        return "(none)".into();
    }
    s.tool_calls
        .iter()
        .map(|c| format!("{}({})", c["name"].as_str().unwrap_or(""), c["args"]))
        .collect::<Vec<_>>()
        .join(", ")
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

/// The whole evaluation as JSON: the summary and every run.
pub(crate) fn json(evals: &[RunEval], elapsed: Duration) -> Value {
    let s = summary(evals);
    json!({
        "summary": s,
        "headline": headline(&s),
        "elapsed_ms": elapsed.as_millis() as u64,
        "runs": evals,
    })
}

#[cfg(test)]
mod tests {
    use super::super::eval::{Changes, RunEval, Side};
    use super::*;

    fn eval(chat: &str, route: bool, before: &str, after: Option<&str>) -> RunEval {
        let side = |status: &str| Side {
            status: status.into(),
            tokens: 10,
            ..Side::default()
        };
        RunEval {
            run: uuid::Uuid::nil(),
            chat: Some(chat.into()),
            graph: "chat".into(),
            input: "hi".into(),
            before: side(before),
            after: after.map(side),
            error: None,
            changes: Changes {
                route,
                status: after != Some(before),
                ..Changes::default()
            },
            answer_diff: None,
            recorded_calls: 1,
            live_calls: 2,
            compared: true,
            judged: Vec::new(),
        }
    }

    #[test]
    fn the_summary_counts_routes_failures_and_chats() {
        let evals = [
            eval("a", true, "completed", Some("completed")),
            eval("a", false, "completed", Some("failed")),
            eval("b", false, "failed", Some("failed")),
            eval("c", false, "completed", None),
        ];
        let s = summary(&evals);
        assert_eq!((s.runs, s.chats, s.route), (4, 3, 1));
        // Now failing: a completed run that fails, and one that could not run.
        assert_eq!(s.now_fail, 2);
        assert_eq!(s.changed, 3);
        assert_eq!(s.tokens, (40, 30));
        assert_eq!((s.recorded_calls, s.live_calls), (4, 8));
        assert_eq!(
            headline(&s),
            "1 of 4 chat turns took another route; 2 now fail; 3 changed in all"
        );
        let text = text(&evals, Duration::from_millis(5), false);
        assert!(text.contains("CHANGED (route) chat a"), "{text}");
        assert!(
            !text.contains("chat b"),
            "an unchanged turn is listed: {text}"
        );
    }
}
