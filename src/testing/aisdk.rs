//! Whether a stream is valid for the AI SDK (`expect.aisdk_valid`), checked
//! without Node: the SSE framing `parseJsonEventStream` reads, each chunk
//! against `uiMessageChunkSchema` (ai 6.0.326,
//! `ai/src/ui-message-stream/ui-message-chunks.ts`: its required keys and
//! their types), and the order rules a server must keep for `useChat`
//! (the same rules as `tests/tools/aisdk-validate/rules.mjs`). An
//! integration test runs the AI SDK's own parser over the same streams and
//! requires the same verdicts.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// What the check found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StreamReport {
    /// The chunks, in order (`[DONE]` excluded).
    pub chunks: Vec<Value>,
    /// Broken rules: the stream is not valid.
    pub errors: Vec<String>,
    /// Legal but doubtful.
    pub warnings: Vec<String>,
}

impl StreamReport {
    /// Whether the stream is valid.
    pub fn valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Checks SSE text as `useChat` reads it.
pub fn check_stream(sse: &str) -> StreamReport {
    let mut r = StreamReport::default();
    let mut done = false;
    for (i, data) in events(sse).into_iter().enumerate() {
        if done {
            r.errors
                .push(format!("event {i} comes after `data: [DONE]`"));
        }
        if data == "[DONE]" {
            done = true;
            continue;
        }
        match serde_json::from_str::<Value>(&data) {
            Ok(chunk) => {
                if let Err(e) = schema(&chunk) {
                    r.errors.push(format!("chunk {}: {e}", r.chunks.len()));
                }
                r.chunks.push(chunk);
            }
            Err(e) => r.errors.push(format!("event {i} is not JSON: {e}")),
        }
    }
    if !done {
        r.errors
            .push("the stream does not end with `data: [DONE]`".into());
    }
    order(&r.chunks.clone(), &mut r);
    r
}

/// The `data` of each SSE event (WHATWG EventSource line rules).
fn events(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)) {
        if line.is_empty() {
            if !data.is_empty() {
                out.push(data.join("\n"));
                data.clear();
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            data.push(value);
        }
    }
    if !data.is_empty() {
        out.push(data.join("\n"));
    }
    out
}

const FINISH_REASONS: &[&str] = &[
    "stop",
    "length",
    "content-filter",
    "tool-calls",
    "error",
    "other",
];

/// The chunk against its schema: required keys present with their types.
fn schema(c: &Value) -> Result<(), String> {
    let Some(t) = c.get("type").and_then(Value::as_str) else {
        return Err("no string `type`".into());
    };
    let s = |k: &str| match c.get(k) {
        Some(Value::String(_)) => Ok(()),
        Some(_) => Err(format!("`{t}`: `{k}` must be a string")),
        None => Err(format!("`{t}`: `{k}` is required")),
    };
    let opt_s = |k: &str| match c.get(k) {
        None | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(format!("`{t}`: `{k}` must be a string")),
    };
    let opt_b = |k: &str| match c.get(k) {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err(format!("`{t}`: `{k}` must be a boolean")),
    };
    let present = |k: &str| match c.get(k) {
        Some(_) => Ok(()),
        None => Err(format!("`{t}`: `{k}` is required (null is allowed)")),
    };
    let meta = || match c.get("providerMetadata") {
        None => Ok(()),
        Some(Value::Object(m)) if m.values().all(Value::is_object) => Ok(()),
        Some(_) => Err(format!(
            "`{t}`: `providerMetadata` must map providers to objects"
        )),
    };
    match t {
        "text-start" | "text-end" | "reasoning-start" | "reasoning-end" => s("id").and(meta()),
        "text-delta" | "reasoning-delta" => s("id").and(s("delta")).and(meta()),
        "error" => s("errorText"),
        "tool-input-start" => s("toolCallId")
            .and(s("toolName"))
            .and(opt_b("dynamic"))
            .and(opt_b("providerExecuted"))
            .and(opt_s("title"))
            .and(match c.get("inputEncoding") {
                None => Ok(()),
                Some(Value::String(e)) if e == "json" || e == "text" => Ok(()),
                Some(_) => Err("`tool-input-start`: `inputEncoding` is json or text".into()),
            }),
        "tool-input-delta" => s("toolCallId").and(s("inputTextDelta")),
        "tool-input-available" => s("toolCallId")
            .and(s("toolName"))
            .and(present("input"))
            .and(opt_b("dynamic"))
            .and(opt_b("providerExecuted"))
            .and(opt_s("title")),
        "tool-input-error" => s("toolCallId")
            .and(s("toolName"))
            .and(present("input"))
            .and(s("errorText"))
            .and(opt_b("dynamic")),
        "tool-approval-request" => s("approvalId").and(s("toolCallId")),
        "tool-output-available" => s("toolCallId")
            .and(present("output"))
            .and(opt_b("dynamic"))
            .and(opt_b("preliminary")),
        "tool-output-error" => s("toolCallId").and(s("errorText")).and(opt_b("dynamic")),
        "tool-output-denied" => s("toolCallId"),
        "source-url" => s("sourceId").and(s("url")).and(opt_s("title")),
        "source-document" => s("sourceId").and(s("mediaType")).and(s("title")),
        "file" => s("url").and(s("mediaType")),
        "start-step" | "finish-step" => Ok(()),
        "start" => opt_s("messageId"),
        "finish" => match c.get("finishReason") {
            None => Ok(()),
            Some(Value::String(r)) if FINISH_REASONS.contains(&r.as_str()) => Ok(()),
            Some(r) => Err(format!(
                "`finish`: finishReason {r} is not one of {}",
                FINISH_REASONS.join(", ")
            )),
        },
        "abort" => opt_s("reason"),
        "message-metadata" => present("messageMetadata"),
        d if d.starts_with("data-") => present("data").and(opt_s("id")).and(opt_b("transient")),
        other => Err(format!("unknown chunk type `{other}`")),
    }
}

/// The order rules (`rules.mjs` `checkChunks`).
fn order(chunks: &[Value], r: &mut StreamReport) {
    let mut o = Order::default();
    for (i, c) in chunks.iter().enumerate() {
        o.chunk(i, c, r);
    }
    o.end(r);
}

/// What the order rules track while they walk the chunks.
#[derive(Default)]
struct Order {
    /// Open text parts.
    text: HashSet<String>,
    /// Open reasoning parts.
    reasoning: HashSet<String>,
    /// Tool calls by id: `streaming`, `input`, `approval` or `output`.
    tools: HashMap<String, &'static str>,
    step: bool,
    finished: bool,
    aborted: bool,
    failed: bool,
    starts: u32,
    /// What was left open, an error or (after `error`/`abort`) a warning.
    unclosed: Vec<String>,
}

impl Order {
    /// Chunk `i`.
    fn chunk(&mut self, i: usize, c: &Value, r: &mut StreamReport) {
        let t = c["type"].as_str().unwrap_or("");
        let at = format!("chunk {i} ({t})");
        let id = c["id"].as_str().unwrap_or("").to_owned();
        let call = c["toolCallId"].as_str().unwrap_or("").to_owned();
        if self.finished {
            r.errors.push(format!("{at} comes after `finish`"));
        }
        match t {
            "start" => {
                self.starts += 1;
                if self.starts > 1 {
                    r.warnings.push(format!("{at}: a second `start`"));
                }
            }
            "start-step" => {
                if self.step {
                    r.errors
                        .push(format!("{at}: the previous step is not finished"));
                }
                self.step = true;
            }
            "finish-step" => {
                if !self.step {
                    r.errors.push(format!("{at}: no step is open"));
                }
                for id in self.text.drain().chain(self.reasoning.drain()) {
                    self.unclosed
                        .push(format!("{at}: part `{id}` is still open"));
                }
                self.step = false;
            }
            "finish" => self.finished = true,
            "abort" => self.aborted = true,
            "error" => self.failed = true,
            t if t.starts_with("tool-") => self.tool(t, &at, call, r),
            t => self.part(t, &at, id, r),
        }
    }

    /// A text or reasoning chunk.
    fn part(&mut self, t: &str, at: &str, id: String, r: &mut StreamReport) {
        let parts = if t.starts_with("text") {
            &mut self.text
        } else {
            &mut self.reasoning
        };
        match t {
            "text-start" | "reasoning-start" if !parts.insert(id.clone()) => {
                r.warnings.push(format!("{at}: `{id}` started twice"));
            }
            "text-delta" | "reasoning-delta" if !parts.contains(&id) => {
                r.errors.push(format!("{at}: `{id}` is not open"));
            }
            "text-end" | "reasoning-end" if !parts.remove(&id) => {
                r.errors.push(format!("{at}: `{id}` is not open"));
            }
            _ => {}
        }
    }

    /// A tool chunk of call `call`.
    fn tool(&mut self, t: &str, at: &str, call: String, r: &mut StreamReport) {
        let tools = &mut self.tools;
        match t {
            "tool-input-start" if tools.insert(call.clone(), "streaming").is_some() => {
                r.warnings.push(format!("{at}: tool call `{call}` reused"));
            }
            "tool-input-delta" if tools.get(&call) != Some(&"streaming") => {
                r.errors.push(format!("{at}: `{call}` has no open input"));
            }
            "tool-input-available" | "tool-input-error" => {
                tools.insert(call, "input");
            }
            "tool-approval-request" => {
                if !tools.contains_key(&call) {
                    r.errors
                        .push(format!("{at}: approval for unknown call `{call}`"));
                }
                tools.insert(call, "approval");
            }
            "tool-output-available" | "tool-output-error" | "tool-output-denied" => {
                match tools.get(&call) {
                    None => r
                        .warnings
                        .push(format!("{at}: call `{call}` is not in this stream")),
                    Some(&"streaming") => r
                        .errors
                        .push(format!("{at}: output before the input is complete")),
                    Some(_) => {}
                }
                tools.insert(call, "output");
            }
            _ => {}
        }
    }

    /// After the last chunk: how the stream ended and what it left open.
    fn end(mut self, r: &mut StreamReport) {
        if self.starts == 0 {
            r.warnings
                .push("no `start` chunk: useChat keeps its own message id".into());
        }
        if !self.finished && !self.aborted {
            r.errors.push("neither `finish` nor `abort`".into());
        }
        if self.step {
            self.unclosed.push("the last step is not finished".into());
        }
        self.unclosed.extend(
            self.text
                .iter()
                .chain(&self.reasoning)
                .map(|id| format!("part `{id}` never ends")),
        );
        self.unclosed.extend(
            self.tools
                .iter()
                .filter(|(_, s)| **s == "streaming")
                .map(|(id, _)| format!("tool call `{id}` never gets its input")),
        );
        // After `error` or `abort` the SDK itself leaves parts open.
        if self.failed || self.aborted {
            r.warnings.extend(
                self.unclosed
                    .into_iter()
                    .map(|m| format!("{m} (after error/abort)")),
            );
        } else {
            r.errors.extend(self.unclosed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(chunks: &[&str]) -> String {
        let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        s.push_str("data: [DONE]\n\n");
        s
    }

    #[test]
    fn a_well_formed_stream_passes() {
        let r = check_stream(&sse(&[
            r#"{"type":"start","messageId":"m"}"#,
            r#"{"type":"start-step"}"#,
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","delta":"hi"}"#,
            r#"{"type":"text-end","id":"t"}"#,
            r#"{"type":"finish-step"}"#,
            r#"{"type":"data-followups","data":["a"]}"#,
            r#"{"type":"finish","finishReason":"stop"}"#,
        ]));
        assert!(r.valid(), "{:?}", r.errors);
        assert_eq!(r.chunks.len(), 8);
    }

    #[test]
    fn broken_rules_are_named() {
        let r = check_stream(&sse(&[
            r#"{"type":"start"}"#,
            r#"{"type":"text-delta","id":"t","delta":"x"}"#,
            r#"{"type":"data-x"}"#,
            r#"{"type":"finish","finishReason":"done"}"#,
        ]));
        let all = r.errors.join("\n");
        assert!(all.contains("`t` is not open"), "{all}");
        assert!(all.contains("`data` is required"), "{all}");
        assert!(all.contains("finishReason"), "{all}");
        let r = check_stream("data: {\"type\":\"start\"}\n\n");
        assert!(r.errors.iter().any(|e| e.contains("[DONE]")));
        assert!(r.errors.iter().any(|e| e.contains("neither `finish`")));
    }
}
