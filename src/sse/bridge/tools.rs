//! Tool calls on the wire: on the answer surface as `tool-*` chunks (a
//! `dynamic-tool` part, or `tool-<name>` for a client-side tool), in a
//! thinking part as an entry of its `toolCalls`; a pass-through result is
//! also answer text.

use serde_json::{Value, json};

use super::thinking::emit;
use super::{At, Bridge, Chunk, text_part};
use crate::events::{EventKind, ToolFailure, ToolFault, ToolReady, ToolReturn};
use crate::graph::spec::Surface;

/// Which UI surface a tool call was shown on.
#[derive(Debug, Clone)]
pub(super) enum ToolOwner {
    Answer,
    Thinking(String),
}

impl Bridge {
    /// A tool call's input and failure.
    pub(super) fn on_tool_call(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let (ev, surface) = (at.ev, at.surface);
        let key = || at.key();
        match &ev.event {
            EventKind::ToolCallStarted { call_id, tool } => {
                self.tool_started(surface, &key(), call_id, tool, out)
            }
            EventKind::ToolCallDelta { call_id, delta } => {
                if let Some(ToolOwner::Answer) = self.tools.get(call_id) {
                    out.push(Chunk::ToolInputDelta {
                        tool_call_id: call_id.clone(),
                        input_text_delta: delta.clone(),
                    });
                }
            }
            EventKind::ToolCallReady(tool_ready) => {
                let ToolReady {
                    call_id,
                    tool,
                    args,
                } = &**tool_ready;
                if !self.tools.contains_key(call_id) {
                    self.tool_started(surface, &key(), call_id, tool, out);
                }
                match self.tools.get(call_id).cloned() {
                    Some(ToolOwner::Answer) => {
                        self.inputs.insert(call_id.clone());
                        out.push(Chunk::ToolInputAvailable {
                            tool_call_id: call_id.clone(),
                            tool_name: tool.clone(),
                            input: args.clone(),
                            dynamic: self.cfg.dynamic(tool),
                        });
                    }
                    Some(ToolOwner::Thinking(k)) => {
                        self.update_tool(&k, call_id, ev.at, out, |v| {
                            v["state"] = json!("input-available");
                            v["input"] = args.clone();
                        })
                    }
                    None => {}
                }
            }
            EventKind::ToolError(tool_fault) => {
                let ToolFault {
                    call_id,
                    tool,
                    error,
                } = &**tool_fault;
                if !self.tools.contains_key(call_id) {
                    self.tool_started(surface, &key(), call_id, tool, out);
                }
                match self.tools.get(call_id).cloned() {
                    // Failed before its input was complete (cut off, not
                    // JSON): the AI SDK wants an input error then.
                    Some(ToolOwner::Answer) if !self.inputs.contains(call_id) => {
                        out.push(Chunk::ToolInputError {
                            tool_call_id: call_id.clone(),
                            tool_name: tool.clone(),
                            input: Value::Null,
                            error_text: tool_error_text(error),
                            dynamic: self.cfg.dynamic(tool),
                        });
                    }
                    Some(ToolOwner::Answer) => out.push(Chunk::ToolOutputError {
                        tool_call_id: call_id.clone(),
                        error_text: tool_error_text(error),
                        dynamic: self.cfg.dynamic(tool),
                    }),
                    Some(ToolOwner::Thinking(k)) => {
                        self.update_tool(&k, call_id, ev.at, out, |v| {
                            v["state"] = json!("output-error");
                            v["errorText"] = json!(tool_error_text(error));
                        })
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// A tool's result; a pass-through result is also answer text.
    pub(super) fn on_tool_result(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let ev = at.ev;
        let EventKind::ToolResult(tool_return) = &ev.event else {
            return;
        };
        let ToolReturn {
            call_id,
            tool,
            output,
            display,
            cached,
            ..
        } = &**tool_return;
        // A cache hit says so: on the answer's tool part as provider
        // metadata, in the thinking panel's tool entry as `cached`.
        match self.tools.get(call_id).cloned() {
            Some(ToolOwner::Answer) => out.push(Chunk::ToolOutputAvailable {
                tool_call_id: call_id.clone(),
                output: output.clone(),
                dynamic: self.cfg.dynamic(tool),
                provider_metadata: cached.then(|| json!({"stategraph": {"cached": true}})),
            }),
            Some(ToolOwner::Thinking(k)) => self.update_tool(&k, call_id, ev.at, out, |v| {
                v["state"] = json!("output-available");
                v["output"] = output.clone();
                if *cached {
                    v["cached"] = json!(true);
                }
            }),
            None => {}
        }
        if *display {
            // Pass-through: the result is part of the answer, verbatim,
            // whichever surface the node streams to.
            self.close_parts(out);
            let text = match output {
                Value::String(s) => s.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            text_part(format!("text-{}", ev.seq), text, out);
            self.answered = true;
        }
    }

    pub(super) fn tool_started(
        &mut self,
        surface: Surface,
        key: &str,
        call_id: &str,
        tool: &str,
        out: &mut Vec<Chunk>,
    ) {
        match surface {
            Surface::Answer => {
                self.tools.insert(call_id.to_owned(), ToolOwner::Answer);
                out.push(Chunk::ToolInputStart {
                    tool_call_id: call_id.to_owned(),
                    tool_name: tool.to_owned(),
                    dynamic: self.cfg.dynamic(tool),
                });
            }
            Surface::Thinking => {
                if let Some(t) = self.thinking.get_mut(key) {
                    t.tools.push(json!({"toolCallId": call_id, "toolName": tool, "state": "input-streaming", "input": null}));
                    t.dirty = true;
                    self.tools
                        .insert(call_id.to_owned(), ToolOwner::Thinking(key.to_owned()));
                }
            }
            Surface::Hidden => {}
        }
    }

    pub(super) fn update_tool(
        &mut self,
        key: &str,
        call_id: &str,
        at: u64,
        out: &mut Vec<Chunk>,
        f: impl FnOnce(&mut Value),
    ) {
        if let Some(t) = self.thinking.get_mut(key) {
            if let Some(v) = t.tool(call_id) {
                f(v);
            }
            out.push(emit(t, at));
        }
    }
}

fn tool_error_text(e: &ToolFailure) -> String {
    format!("{}: {}", e.kind, e.message)
}
