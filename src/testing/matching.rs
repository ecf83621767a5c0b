//! How expected values match actual ones, and how a mismatch is shown.
//!
//! Partial matching: an expected object matches an object holding at least
//! its keys, each matching; an expected list matches a list of the same
//! length, item by item; numbers match by value (`1` is `1.0`); anything
//! else must be equal.

use serde_json::Value;

/// Whether `actual` contains `expected` (see the module docs).
pub(crate) fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| contains(av, ev))),
        (Value::Array(a), Value::Array(e)) => {
            a.len() == e.len() && a.iter().zip(e).all(|(av, ev)| contains(av, ev))
        }
        (Value::Number(a), Value::Number(e)) => a.as_f64() == e.as_f64(),
        _ => actual == expected,
    }
}

/// `expected` and `actual` as pretty JSON, line by line with `-`/`+`
/// markers where they differ. Objects of `actual` are shown with the keys
/// `expected` names only (partial matching ignores the others).
pub(crate) fn json_diff(expected: &Value, actual: &Value) -> String {
    let e = pretty(expected);
    let a = pretty(&project(actual, expected));
    text_diff(&e, &a)
}

/// `actual` cut to the shape of `expected`: objects keep only the keys
/// `expected` has (when it has them at all), lists of the same length are
/// cut item by item.
fn project(actual: &Value, expected: &Value) -> Value {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) if e.keys().any(|k| a.contains_key(k)) => {
            Value::Object(
                a.iter()
                    .filter_map(|(k, v)| Some((k.clone(), project(v, e.get(k)?))))
                    .collect(),
            )
        }
        (Value::Array(a), Value::Array(e)) if a.len() == e.len() => {
            Value::Array(a.iter().zip(e).map(|(a, e)| project(a, e)).collect())
        }
        _ => actual.clone(),
    }
}

/// Pretty JSON, or the plain text of a string.
pub(super) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A line diff: common lines with two spaces, expected-only lines with
/// `- `, actual-only with `+ ` (longest common subsequence; past 400 lines
/// on a side, the two texts are shown whole, one after the other).
pub(crate) fn text_diff(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    if e.len() > 400 || a.len() > 400 {
        let mut out = String::new();
        for l in &e {
            out.push_str(&format!("- {l}\n"));
        }
        for l in &a {
            out.push_str(&format!("+ {l}\n"));
        }
        return out;
    }
    // lcs[i][j]: the longest common subsequence of e[i..] and a[j..].
    let mut lcs = vec![vec![0u32; a.len() + 1]; e.len() + 1];
    for i in (0..e.len()).rev() {
        for j in (0..a.len()).rev() {
            lcs[i][j] = if e[i] == a[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < e.len() || j < a.len() {
        if i < e.len() && j < a.len() && e[i] == a[j] {
            out.push_str(&format!("  {}\n", e[i]));
            i += 1;
            j += 1;
        } else if i < e.len() && (j == a.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("- {}\n", e[i]));
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", a[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn partial_objects_exact_lists_numbers_by_value() {
        let actual = json!({"a": 1, "b": {"c": [1, {"d": 2, "e": 3}]}, "f": "x"});
        assert!(contains(&actual, &json!({"a": 1.0})));
        assert!(contains(&actual, &json!({"b": {"c": [1, {"d": 2}]}})));
        assert!(!contains(&actual, &json!({"b": {"c": [1]}})));
        assert!(!contains(&actual, &json!({"g": null})));
        assert!(!contains(&actual, &json!({"f": "y"})));
        assert!(contains(&json!("x"), &json!("x")));
    }

    #[test]
    fn diffs_mark_what_changed() {
        let d = text_diff("a\nb\nc", "a\nx\nc");
        assert_eq!(d, "  a\n- b\n+ x\n  c\n");
        let d = json_diff(&json!({"k": 1}), &json!({"k": 2, "other": 3}));
        assert_eq!(d, "  {\n-   \"k\": 1\n+   \"k\": 2\n  }\n");
    }
}
