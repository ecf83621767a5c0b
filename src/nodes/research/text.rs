//! Text and record helpers shared by the research steps: terms and their
//! overlap (how passages are matched to sub-queries), passages, URL
//! identity, and reading the records `tool` nodes write.
//!
//! Matching is lexical on purpose: it is deterministic, free, and explains
//! itself ("2 of 3 terms"); the model reads the passages it selects. Terms
//! are lowercase words of three or more characters without common English
//! stop words, with plurals folded (`pumps` → `pump`) — recall for
//! choosing passages, not linguistics.

use std::collections::BTreeSet;

use reqwest::Url;
use serde_json::Value;

const STOP_WORDS: &[&str] = &[
    "about", "all", "and", "any", "are", "but", "can", "does", "did", "for", "from", "had", "has",
    "have", "how", "into", "its", "not", "our", "out", "than", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "those", "was", "were", "what", "when", "where",
    "which", "who", "why", "will", "with", "would", "you", "your",
];

/// The terms of `text`.
pub(super) fn terms(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .map(fold_plural)
        .collect()
}

fn fold_plural(w: String) -> String {
    if let Some(stem) = w.strip_suffix("ies").filter(|s| s.chars().count() >= 2) {
        return format!("{stem}y");
    }
    match w.strip_suffix('s') {
        Some(stem) if !stem.ends_with('s') && stem.chars().count() >= 3 => stem.to_owned(),
        _ => w,
    }
}

/// Share of `wanted` found in `have` (0 when nothing is wanted).
pub(super) fn overlap(wanted: &BTreeSet<String>, have: &BTreeSet<String>) -> f64 {
    if wanted.is_empty() {
        return 0.0;
    }
    wanted.intersection(have).count() as f64 / wanted.len() as f64
}

/// `text` cut into passages of at most `max` characters: lines (the
/// fetcher puts one block per line) are kept whole when they fit and glued
/// to the next while the passage is short (headings stay with their text);
/// longer lines are cut after sentences, and a sentence longer than `max`
/// at a space.
pub(super) fn passages(text: &str, max: usize) -> Vec<String> {
    fn flush(current: &mut String, out: &mut Vec<String>) {
        let t = current.trim();
        if !t.is_empty() {
            out.push(t.to_owned());
        }
        current.clear();
    }
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        for piece in pieces(line, max) {
            let len = current.chars().count();
            if len > 0 && (len + 1 + piece.chars().count() > max || len >= max / 2) {
                flush(&mut current, &mut out);
            }
            if !current.is_empty() {
                current.push('\n');
            }
            current.push_str(piece);
        }
    }
    flush(&mut current, &mut out);
    out
}

/// A line as pieces of at most `max` characters.
fn pieces(line: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while rest.chars().count() > max {
        // The byte offset just past the `max`-th character.
        let limit = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
        let head = &rest[..limit];
        let cut = [". ", "! ", "? "]
            .iter()
            .filter_map(|p| head.rfind(p).map(|i| i + 1))
            .max()
            .filter(|&i| i > limit / 4)
            .or_else(|| head.rfind(' ').filter(|&i| i > 0))
            .unwrap_or(limit);
        out.push(rest[..cut].trim());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// What makes two URLs the same page: host without `www.`, port, path
/// without a trailing slash, and the query without tracking parameters;
/// not the scheme or the fragment.
pub(super) fn canonical_url(url: &str) -> String {
    let Ok(u) = Url::parse(url.trim()) else {
        return url.trim().to_lowercase();
    };
    let host = u.host_str().unwrap_or("");
    let host = host.strip_prefix("www.").unwrap_or(host);
    let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
    let path = u.path().trim_end_matches('/');
    let query: Vec<String> = u
        .query_pairs()
        .filter(|(k, _)| !k.starts_with("utm_") && k != "fbclid" && k != "gclid")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    format!("{host}{port}{path}{query}")
}

/// The output of a tool record, when the call succeeded.
pub(super) fn output(record: &Value) -> Option<&Value> {
    match record.get("error") {
        Some(_) => None,
        None => record.get("output"),
    }
}

/// The failure message of a tool record, when the call failed.
pub(super) fn error(record: &Value) -> Option<&str> {
    record
        .get("error")
        .map(|e| e["message"].as_str().unwrap_or("failed"))
}

/// A string argument of a tool record.
pub(super) fn arg<'a>(record: &'a Value, name: &str) -> Option<&'a str> {
    record["args"][name].as_str()
}

/// The items in quotes, comma-separated (for notes).
pub(super) fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("“{i}”"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whitespace collapsed, at most `max` characters (with `…` when cut).
pub(super) fn clip(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_stop_words_and_fold_plurals() {
        let t: Vec<String> = terms("What do heat pumps cost? Batteries, the COP and 2024 costs")
            .into_iter()
            .collect();
        assert_eq!(t, ["2024", "battery", "cop", "cost", "heat", "pump"]);
        assert_eq!(fold_plural("glass".into()), "glass");
        assert_eq!(fold_plural("gas".into()), "gas");
        let q = terms("heat pump noise");
        assert!((overlap(&q, &terms("Noise of heat pumps")) - 1.0).abs() < 1e-9);
        assert!((overlap(&q, &terms("a heat wave")) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(overlap(&BTreeSet::new(), &q), 0.0);
    }

    #[test]
    fn passages_keep_lines_glue_headings_and_cut_long_lines() {
        let text =
            "Costs\nA heat pump costs 8,000 to 15,000 euros installed.\n\nNoise: about 40 dB.";
        assert_eq!(
            passages(text, 60),
            [
                "Costs\nA heat pump costs 8,000 to 15,000 euros installed.",
                "Noise: about 40 dB."
            ]
        );
        let long = "First sentence is here. Second sentence is a bit longer than that. Third.";
        let p = passages(long, 40);
        assert!(p.iter().all(|s| s.chars().count() <= 40), "{p:?}");
        assert_eq!(p[0], "First sentence is here.");
        assert_eq!(p.concat().replace(' ', ""), long.replace(' ', ""));
        let word = "x".repeat(25);
        assert_eq!(passages(&word, 10).concat(), word, "no space: cut anywhere");
        assert!(passages("  \n\n ", 10).is_empty());
    }

    #[test]
    fn urls_are_the_same_page_without_scheme_www_slash_fragment_or_tracking() {
        let a = canonical_url("https://www.Example.com/a/?utm_source=x&id=2#top");
        assert_eq!(a, "example.com/a?id=2");
        assert_eq!(canonical_url("http://example.com/a?id=2"), a);
        assert_ne!(canonical_url("http://example.com:8080/a?id=2"), a);
        assert_eq!(canonical_url(" not a url "), "not a url");
    }

    #[test]
    fn records_give_output_or_error() {
        let ok = serde_json::json!({"tool": "t", "args": {"url": "u"}, "output": {"x": 1}});
        let bad = serde_json::json!({"tool": "t", "args": {"url": "u"}, "error": {"error": true, "message": "down"}});
        assert_eq!(output(&ok).unwrap()["x"], 1);
        assert!(output(&bad).is_none() && error(&ok).is_none());
        assert_eq!(error(&bad), Some("down"));
        assert_eq!(arg(&bad, "url"), Some("u"));
        assert_eq!(clip("a  b\nc d", 3), "a b…");
    }
}
