//! The JSON paths `answer.json_path` reads: `$`, then `.name`, `[N]` or
//! `["any key"]` steps — the part of RFC 9535 a test needs to point at one
//! value (no wildcards, filters or slices).

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Step {
    /// A member of an object.
    Key(String),
    /// An element of an array (negative: from the end).
    Index(i64),
}

/// Parses a path; `None` when it is not of the supported form.
pub(super) fn parse(path: &str) -> Option<Vec<Step>> {
    let mut rest = path.trim().strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            steps.push(Step::Key(r[..end].to_owned()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let close = r.find(']')?;
            let inner = r[..close].trim();
            let step = if let Some(q) = inner
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            {
                Step::Key(q.to_owned())
            } else {
                Step::Index(inner.parse().ok()?)
            };
            steps.push(step);
            rest = &r[close + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// The value at `steps`, if there is one.
pub(super) fn select<'a>(v: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    steps.iter().try_fold(v, |cur, step| match step {
        Step::Key(k) => cur.get(k),
        Step::Index(i) => {
            let arr = cur.as_array()?;
            let idx = if *i < 0 {
                arr.len().checked_sub(i.unsigned_abs() as usize)?
            } else {
                *i as usize
            };
            arr.get(idx)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_select_what_they_name() {
        let v = json!({"a": {"b": [1, {"c": "x"}]}, "odd key": 2});
        let at = |p: &str| select(&v, &parse(p).unwrap()).cloned();
        assert_eq!(at("$.a.b[1].c"), Some(json!("x")));
        assert_eq!(at("$.a.b[-1].c"), Some(json!("x")));
        assert_eq!(at("$[\"odd key\"]"), Some(json!(2)));
        assert_eq!(at("$"), Some(v.clone()));
        assert_eq!(at("$.a.missing"), None);
        assert_eq!(at("$.a.b[5]"), None);
        assert!(parse("a.b").is_none());
        assert!(parse("$..a").is_none());
        assert!(parse("$.a[x]").is_none());
    }
}
