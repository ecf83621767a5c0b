//! Content-based pass-through (`pass_through:` on `agent` nodes): a tool
//! result that says it is display-ready is shown to the user verbatim, as
//! the answer, and the model is not asked to restate it.
//!
//! ```yaml
//! pass_through:
//!   tags: [table, card, chart, text]   # a result holding <table>…, <chart name="…">… is shown as it is
//!   markers: ["[DISPLAY_VERBATIM]"]    # a result holding a marker is shown with the marker removed
//! ```
//!
//! Only text results are looked at (a tool whose answer is a JSON object
//! is data for the model). This complements the per-tool `pass_through`
//! policy of configuration, which marks every result of one tool: here the
//! result itself decides, whichever tool returned it. The text shown —
//! marker removed — is also the result recorded, so a re-execution shows
//! the same.

use serde_json::Value;

use super::BuildCx;
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};

/// The setting.
pub(super) const SETTING: SettingDoc = SettingDoc::new(
    "pass_through",
    r#"{"type":"object","additionalProperties":false,"properties":{"tags":{"type":"array","items":{"type":"string"}},"markers":{"type":"array","items":{"type":"string"}}}}"#,
    "tool results shown verbatim as the answer by their content: {tags: [table, …], markers: [\"[DISPLAY_VERBATIM]\"]}",
);

/// What makes a text result display-ready.
#[derive(Debug, Default)]
pub(super) struct PassThrough {
    /// `<tag>` or `<tag …>` openers.
    tags: Vec<String>,
    /// Flags removed from the text shown.
    markers: Vec<String>,
}

impl PassThrough {
    /// Reads `pass_through`.
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Result<Self, Reported> {
        let Some(v) = cx.setting("pass_through") else {
            return Ok(Self::default());
        };
        let SpValue::Map(entries) = &v.value else {
            cx.error(
                v.loc,
                "invalid-setting",
                "`pass_through` is a mapping `{tags: [...], markers: [...]}`",
                None,
            );
            return Err(Reported);
        };
        let mut out = Self::default();
        for (k, list) in entries {
            let items: Vec<String> = match &list.value {
                SpValue::Seq(items) => items.iter().filter_map(|i| i.value.as_name()).collect(),
                other => other.as_name().into_iter().collect(),
            };
            if items.iter().any(|i| i.trim().is_empty()) {
                cx.error(
                    list.loc,
                    "invalid-setting",
                    format!("`pass_through.{}` has an empty entry", k.value),
                    None,
                );
                return Err(Reported);
            }
            match k.value.as_str() {
                "tags" => {
                    if let Some(bad) = items.iter().find(|t| {
                        !t.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    }) {
                        cx.error(
                            list.loc,
                            "invalid-setting",
                            format!("`{bad}` is not a tag name: write `table` for `<table>`"),
                            None,
                        );
                        return Err(Reported);
                    }
                    out.tags = items;
                }
                "markers" => out.markers = items,
                other => {
                    cx.error(
                        k.loc,
                        "invalid-setting",
                        format!("`{other}` is not part of `pass_through` (tags, markers)"),
                        None,
                    );
                    return Err(Reported);
                }
            }
        }
        Ok(out)
    }

    /// The text to show for a result, when its content makes it
    /// display-ready: markers removed, tags kept.
    pub(super) fn shown(&self, output: &Value) -> Option<String> {
        let Value::String(text) = output else {
            return None;
        };
        if self.markers.iter().any(|m| text.contains(m.as_str())) {
            let mut shown = text.clone();
            for m in &self.markers {
                // "[DISPLAY_VERBATIM] text": the space after the flag goes too.
                shown = shown.replace(&format!("{m} "), "").replace(m.as_str(), "");
            }
            return Some(shown.trim().to_owned());
        }
        let tagged = self
            .tags
            .iter()
            .any(|t| text.contains(&format!("<{t}>")) || text.contains(&format!("<{t} ")));
        tagged.then(|| text.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> PassThrough {
        PassThrough {
            tags: vec!["table".into(), "chart".into()],
            markers: vec!["[DISPLAY_VERBATIM]".into()],
        }
    }

    #[test]
    fn tagged_text_is_shown_as_it_is_and_markers_are_removed() {
        let r = rules();
        let table = "<table>[{\"id\":1}]</table>";
        assert_eq!(r.shown(&json!(table)).as_deref(), Some(table));
        let chart = "<chart name=\"sales\">{}</chart>";
        assert_eq!(r.shown(&json!(chart)).as_deref(), Some(chart));
        assert_eq!(
            r.shown(&json!("[DISPLAY_VERBATIM] Invoice INV-1 was sent."))
                .as_deref(),
            Some("Invoice INV-1 was sent.")
        );
        assert_eq!(r.shown(&json!("a <tablet> is not a table")), None);
        assert_eq!(r.shown(&json!({"text": "<table>[]</table>"})), None);
        assert_eq!(PassThrough::default().shown(&json!(table)), None);
    }
}
