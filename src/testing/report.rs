//! What `stategraph test` prints and writes: a readable report for the
//! terminal (each failure with the expected and the actual, and diffs),
//! JUnit XML for CI systems, and JSON.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::exec::CaseResult;
use super::expect::Failure;

/// The terminal report: every failure in full, passes only with
/// `verbose`, then a summary line.
pub(crate) fn text(results: &[CaseResult], elapsed: Duration, verbose: bool) -> String {
    let mut out = String::new();
    for r in results {
        if r.passed() {
            // A passed case is listed when asked, and always when a judge
            // passed it: its verdicts and reasons are what was asked for.
            if verbose || r.judged.iter().any(|j| j.verdict == "pass") {
                let _ = writeln!(
                    out,
                    "ok   {} › {} ({:.1} ms)",
                    r.file,
                    r.name,
                    ms(r.duration)
                );
                judged_passes(&mut out, r);
            }
            not_judged(&mut out, &r.file, r);
            continue;
        }
        let _ = writeln!(
            out,
            "FAIL {}:{}:{} › {} (graph {})",
            r.file, r.loc.line, r.loc.column, r.name, r.graph
        );
        for f in &r.failures {
            failure(&mut out, &r.file, f);
        }
        judged_passes(&mut out, r);
        not_judged(&mut out, &r.file, r);
        if let Some(last) = r.turns.last() {
            let _ = writeln!(
                out,
                "     the run: {} ({})",
                arrow(&last.path),
                last.status.map_or("?", |s| s.as_str())
            );
        }
        out.push('\n');
    }
    let failed = results.iter().filter(|r| !r.passed()).count();
    let skipped = skipped(results);
    let skipped = if skipped > 0 {
        format!("; {skipped} judged expectation(s) not judged: no judge model (--judge ROLE)")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{} passed, {failed} failed ({} cases in {:.0} ms){skipped}",
        results.len() - failed,
        results.len(),
        ms(elapsed)
    );
    out
}

/// The criteria a judge passed, each with its reason and the judge.
fn judged_passes(out: &mut String, r: &CaseResult) {
    for j in r.judged.iter().filter(|j| j.verdict == "pass") {
        let _ = writeln!(
            out,
            "  ✓ judged “{}”: {} (judged by {})",
            j.criterion, j.reason, j.judge
        );
    }
}

/// How many judged expectations were not judged.
fn skipped(results: &[CaseResult]) -> usize {
    results
        .iter()
        .flat_map(|r| &r.judged)
        .filter(|j| j.verdict == "skipped")
        .count()
}

/// The judged expectations of a case that were not judged (no judge
/// configured): said, never passed silently.
fn not_judged(out: &mut String, file: &str, r: &CaseResult) {
    for j in r.judged.iter().filter(|j| j.verdict == "skipped") {
        let _ = writeln!(
            out,
            "  - not judged at {file}:{}:{}: “{}” (no judge model: --judge ROLE or [testing] judge)",
            j.line, j.column, j.criterion
        );
    }
}

fn arrow(path: &[String]) -> String {
    if path.is_empty() {
        "(no node ran)".into()
    } else {
        path.join(" → ")
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn failure(out: &mut String, file: &str, f: &Failure) {
    let turn = if f.turn > 0 {
        format!("turn {}, ", f.turn + 1)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  ✗ {turn}{} at {file}:{}:{}: {}",
        f.kind, f.line, f.column, f.message
    );
    if let (Some(e), Some(a)) = (&f.expected, &f.actual) {
        let _ = writeln!(out, "      expected: {}", indent(e));
        let _ = writeln!(out, "      actual:   {}", indent(a));
    }
    if let Some(d) = &f.diff {
        let _ = writeln!(out, "      diff (- expected, + actual):");
        for line in d.lines() {
            let _ = writeln!(out, "        {line}");
        }
    }
}

fn indent(s: &str) -> String {
    let s: String = if s.chars().count() > 600 {
        format!("{}…", s.chars().take(600).collect::<String>())
    } else {
        s.to_owned()
    };
    s.replace('\n', "\n                ")
}

/// JUnit XML: one `testsuite` per file, one `testcase` per case, a
/// `failure` per unmet expectation.
pub(crate) fn junit(results: &[CaseResult], elapsed: Duration) -> String {
    let mut files: Vec<&str> = results.iter().map(|r| &*r.file).collect();
    files.dedup();
    files.sort_unstable();
    files.dedup();
    let failed = results.iter().filter(|r| !r.passed()).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"stategraph test\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" time=\"{:.3}\">",
        results.len(),
        elapsed.as_secs_f64()
    );
    for file in files {
        let cases: Vec<&CaseResult> = results.iter().filter(|r| &*r.file == file).collect();
        let time: f64 = cases.iter().map(|c| c.duration.as_secs_f64()).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\">",
            xml(file),
            cases.len(),
            cases.iter().filter(|c| !c.passed()).count()
        );
        for c in cases {
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\"",
                xml(&c.name),
                xml(&c.graph),
                xml(file),
                c.loc.line,
                c.duration.as_secs_f64()
            );
            if c.passed() && c.judged.is_empty() {
                out.push_str("/>\n");
                continue;
            }
            out.push_str(">\n");
            for f in &c.failures {
                let mut body = String::new();
                failure(&mut body, file, f);
                let _ = writeln!(
                    out,
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>",
                    f.kind,
                    xml(&f.message),
                    xml(&body)
                );
            }
            if !c.judged.is_empty() {
                // Verdicts that passed and expectations not judged are
                // told here, after the failures as JUnit's schema orders
                // them (a failed verdict is a `failure` too).
                let lines: Vec<String> = c
                    .judged
                    .iter()
                    .map(|j| format!("judge {}: “{}”: {}", j.verdict, j.criterion, j.reason))
                    .collect();
                let _ = writeln!(
                    out,
                    "      <system-out>{}</system-out>",
                    xml(&lines.join("\n"))
                );
            }
            out.push_str("    </testcase>\n");
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text escaped for XML attributes and content (characters XML 1.0 does
/// not allow are dropped).
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// The JSON report: counts and every case with its failures and what
/// each turn did.
pub(crate) fn json(results: &[CaseResult], elapsed: Duration) -> Value {
    let failed = results.iter().filter(|r| !r.passed()).count();
    json!({
        "passed": results.len() - failed,
        "failed": failed,
        "not_judged": skipped(results),
        "duration_ms": ms(elapsed),
        "cases": results.iter().map(|r| json!({
            "file": &*r.file,
            "name": r.name,
            "graph": r.graph,
            "line": r.loc.line,
            "column": r.loc.column,
            "passed": r.passed(),
            "duration_ms": ms(r.duration),
            "failures": r.failures,
            "judged": r.judged,
            "turns": r.turns,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_markup_and_drops_what_xml_forbids() {
        assert_eq!(xml("a<b>&\"c'\u{1}\n"), "a&lt;b&gt;&amp;&quot;c&apos;&#10;");
    }
}
