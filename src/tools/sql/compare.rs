//! Aligning two sources and classing their differences — pure, so the
//! classification can be tested on numbers alone.
//!
//! Each side arrives as `(key, value)` rows, one per combination of the
//! `on` dimensions. Rows are matched by key; a key missing on one side
//! counts as zero there (so totals add up) and is always `major`. The
//! difference is `right − left`, its percentage relative to `|left|`.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::Thresholds;

/// Differences shown in `top_differences`.
const TOP: usize = 5;

/// A difference smaller than this is zero (float sums of decimals).
const EPSILON: f64 = 1e-9;

/// One aligned key.
#[derive(Debug)]
struct Aligned {
    key: Vec<Value>,
    left: Option<f64>,
    right: Option<f64>,
}

/// The class of a difference.
fn classify(a: &Aligned, diff: f64, pct: Option<f64>, t: &Thresholds) -> &'static str {
    if a.left.is_none() || a.right.is_none() {
        return "major";
    }
    if diff.abs() < EPSILON {
        return "match";
    }
    match pct.map(f64::abs) {
        Some(p) if p <= t.minor_pct => "match",
        Some(p) if p <= t.major_pct => "minor",
        _ => "major",
    }
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    let r = (x * f).round() / f;
    if r == 0.0 { 0.0 } else { r }
}

/// Orders keys: element by element, numbers numerically, otherwise by JSON text.
fn cmp_keys(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Value::Null, Value::Null) => Ordering::Equal,
            (Value::Null, _) => Ordering::Less,
            (_, Value::Null) => Ordering::Greater,
            (Value::Number(m), Value::Number(n)) => m
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&n.as_f64().unwrap_or(0.0)),
            (Value::String(s), Value::String(t)) => s.cmp(t),
            _ => x.to_string().cmp(&y.to_string()),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// What the sides are called and how the result is cut.
pub(super) struct Names<'a> {
    pub(super) left: &'a str,
    pub(super) right: &'a str,
    pub(super) on: &'a [String],
    pub(super) row_limit: usize,
}

/// Aligns `left` and `right` rows and builds `{summary, top_differences,
/// rows, truncated}`.
pub(super) fn compare(
    names: &Names<'_>,
    left: Vec<(Value, f64)>,
    right: Vec<(Value, f64)>,
    t: &Thresholds,
) -> Value {
    let aligned = align(left, right);

    let mut counts: HashMap<&str, usize> = HashMap::new();
    let (mut left_total, mut right_total, mut max_abs) = (0.0f64, 0.0f64, 0.0f64);
    let (mut only_left, mut only_right) = (0usize, 0usize);
    let mut rows: Vec<(f64, Value)> = Vec::with_capacity(aligned.len());
    for a in &aligned {
        let (l, r) = (a.left.unwrap_or(0.0), a.right.unwrap_or(0.0));
        let diff = r - l;
        let pct = (a.left.is_some() && l.abs() >= EPSILON).then(|| diff / l.abs() * 100.0);
        let class = classify(a, diff, pct, t);
        *counts.entry(class).or_default() += 1;
        left_total += l;
        right_total += r;
        max_abs = max_abs.max(diff.abs());
        let key: Map<String, Value> = names
            .on
            .iter()
            .cloned()
            .zip(a.key.iter().cloned())
            .collect();
        let mut row = json!({
            "key": key,
            "left": a.left.map(|v| round(v, 6)),
            "right": a.right.map(|v| round(v, 6)),
            "difference": round(diff, 6),
            "difference_pct": pct.map(|p| round(p, 4)),
            "class": class,
        });
        match (a.left, a.right) {
            (Some(_), None) => {
                only_left += 1;
                row["only_in"] = json!(names.left);
            }
            (None, Some(_)) => {
                only_right += 1;
                row["only_in"] = json!(names.right);
            }
            _ => {}
        }
        rows.push((diff.abs(), row));
    }
    let mut top: Vec<&(f64, Value)> = rows.iter().filter(|(_, r)| r["class"] != "match").collect();
    top.sort_by(|a, b| b.0.total_cmp(&a.0));
    let top: Vec<Value> = top.into_iter().take(TOP).map(|(_, r)| r.clone()).collect();
    let truncated = rows.len() > names.row_limit;
    let count = |c: &str| counts.get(c).copied().unwrap_or(0);
    json!({
        "summary": {
            "keys": aligned.len(),
            "match": count("match"),
            "minor": count("minor"),
            "major": count("major"),
            "only_in_left": only_left,
            "only_in_right": only_right,
            "left_total": round(left_total, 6),
            "right_total": round(right_total, 6),
            "difference_total": round(right_total - left_total, 6),
            "max_abs_difference": round(max_abs, 6),
        },
        "top_differences": top,
        "rows": rows.into_iter().take(names.row_limit).map(|(_, r)| r).collect::<Vec<_>>(),
        "truncated": truncated,
    })
}

/// Pairs the two sides' rows by key (a key on one side only has `None` on
/// the other), in key order.
fn align(left: Vec<(Value, f64)>, right: Vec<(Value, f64)>) -> Vec<Aligned> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut aligned: Vec<Aligned> = Vec::new();
    for (side, rows) in [(0, left), (1, right)] {
        for (key, value) in rows {
            let k = key.to_string();
            let i = *index.entry(k).or_insert_with(|| {
                let key = match key {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                aligned.push(Aligned {
                    key,
                    left: None,
                    right: None,
                });
                aligned.len() - 1
            });
            if side == 0 {
                aligned[i].left = Some(value)
            } else {
                aligned[i].right = Some(value)
            }
        }
    }
    aligned.sort_by(|a, b| cmp_keys(&a.key, &b.key));
    aligned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_classed_by_the_thresholds() {
        let on = vec!["account".to_owned()];
        let names = Names {
            left: "a",
            right: "b",
            on: &on,
            row_limit: 3,
        };
        let row = |k: &str, v: f64| (json!([k]), v);
        let left = vec![
            row("1", 100.0),
            row("2", 100.0),
            row("3", 100.0),
            row("4", 100.0),
            row("5", 0.0),
            row("6", 10.0),
        ];
        let right = vec![
            row("1", 100.0),
            row("2", 100.5),
            row("3", 104.0),
            row("4", 110.0),
            row("5", 1.0),
            row("7", 3.0),
        ];
        let t = Thresholds {
            minor_pct: 1.0,
            major_pct: 5.0,
        };
        let v = compare(&names, left, right, &t);
        let all = compare(
            &Names {
                row_limit: 100,
                ..names
            },
            vec![],
            vec![],
            &t,
        );
        assert_eq!(all["summary"]["keys"], 0);
        let s = &v["summary"];
        // 1 equal, 2 within 1 %: match; 3 at 4 %: minor; 4 at 10 %, 5 from zero, 6 and 7 one-sided: major.
        assert_eq!(
            (
                s["match"].as_u64(),
                s["minor"].as_u64(),
                s["major"].as_u64()
            ),
            (Some(2), Some(1), Some(4))
        );
        assert_eq!(
            (s["only_in_left"].as_u64(), s["only_in_right"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(s["left_total"], 410.0);
        assert_eq!(s["right_total"], 418.5);
        assert_eq!(s["max_abs_difference"], 10.0);
        assert_eq!(v["rows"].as_array().unwrap().len(), 3);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["rows"][1]["difference_pct"], 0.5);
        let top: Vec<&str> = v["top_differences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"]["account"].as_str().unwrap())
            .collect();
        assert_eq!(top, ["4", "6", "3", "7", "5"]);
        assert_eq!(v["top_differences"][1]["only_in"], "a");
        assert_eq!(v["top_differences"][1]["right"], Value::Null);
    }

    #[test]
    fn keys_sort_numbers_numerically() {
        assert_eq!(cmp_keys(&[json!(9)], &[json!(10)]), Ordering::Less);
        assert_eq!(
            cmp_keys(&[json!("a"), json!(2)], &[json!("a"), json!(1)]),
            Ordering::Greater
        );
        assert_eq!(cmp_keys(&[Value::Null], &[json!(1)]), Ordering::Less);
    }
}
