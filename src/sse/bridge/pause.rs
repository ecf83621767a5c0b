//! Pauses for a person on the wire: a run that stops at interrupts ends
//! its message the way the AI SDK expects one that waits for the user, and
//! its continuation streams into the same message.
//!
//! - a tool approval: the call's tool part (`tool-input-available`, sent
//!   here if the node streamed it elsewhere), then `tool-approval-request`
//!   with the interrupt id as `approvalId`; the client answers with
//!   `addToolApprovalResponse` and sends the message back;
//! - a client-side tool: its `tool-<name>` part in `input-available`; the
//!   client runs it (`onToolCall`) and answers with `addToolOutput`;
//! - a question: a text part with the question and a `data-interrupt` part
//!   with the whole interrupt (its field's schema, options); the next user
//!   message answers it;
//! - then `finish-step` and `finish` (`tool-calls` when a tool waits).
//!
//! `run_resumed` sends `start` with the same message id again (and opens a
//! step, which the next model call continues in: see `Bridge::resume_step`),
//! and a denied call `tool-output-denied`.

use serde_json::json;

use super::{At, Bridge, Chunk, ToolOwner, text_part};
use crate::events::{Ask, Event, Interrupt};

impl Bridge {
    /// The run paused at `interrupts`.
    pub(super) fn on_pause(&mut self, ev: &Event, interrupts: &[Interrupt], out: &mut Vec<Chunk>) {
        self.flush(out);
        self.close_parts(out);
        let mut waits_for_tools = false;
        for (i, it) in interrupts.iter().enumerate() {
            match &it.ask {
                Ask::Approval {
                    call_id,
                    tool,
                    args,
                }
                | Ask::ClientTool {
                    call_id,
                    tool,
                    args,
                } => {
                    waits_for_tools = true;
                    self.tool_part(call_id, tool, args, out);
                    if matches!(it.ask, Ask::Approval { .. }) {
                        out.push(Chunk::ToolApprovalRequest {
                            approval_id: it.id.clone(),
                            tool_call_id: call_id.clone(),
                        });
                    }
                }
                // A breakpoint is the developer's, not the conversation's:
                // no text, the interrupt as data (what matched, what is next).
                Ask::Breakpoint { .. } => out.push(Chunk::Data {
                    name: "interrupt".into(),
                    id: Some(it.id.clone()),
                    data: json!(it),
                    transient: false,
                }),
                Ask::Question { question, .. } => {
                    text_part(format!("text-{}-{i}", ev.seq), question.clone(), out);
                    out.push(Chunk::Data {
                        name: "interrupt".into(),
                        id: Some(it.id.clone()),
                        data: json!(it),
                        transient: false,
                    });
                }
            }
        }
        self.close_step(out);
        if ev.seq <= self.resumed {
            // The run went on after this pause: the message stays open.
            return;
        }
        let ids: Vec<&str> = interrupts.iter().map(|i| i.id.as_str()).collect();
        out.push(Chunk::Finish {
            finish_reason: if waits_for_tools {
                "tool-calls"
            } else {
                "stop"
            }
            .into(),
            message_metadata: json!({ "interrupted": true, "interrupts": ids }),
        });
        self.done = true;
    }

    /// The answer tool part of a call that waits, if the node did not
    /// stream one (a thinking or hidden node): the client needs the part to
    /// answer on.
    fn tool_part(
        &mut self,
        call_id: &str,
        tool: &str,
        args: &serde_json::Value,
        out: &mut Vec<Chunk>,
    ) {
        if self.inputs.contains(call_id) {
            return;
        }
        self.tools.insert(call_id.to_owned(), ToolOwner::Answer);
        self.inputs.insert(call_id.to_owned());
        out.push(Chunk::ToolInputAvailable {
            tool_call_id: call_id.to_owned(),
            tool_name: tool.to_owned(),
            input: args.clone(),
            dynamic: self.cfg.dynamic(tool),
        });
    }

    /// The run continues: the same message again, and a step for what the
    /// answers lead to (the approved call's output, say) before the next
    /// model call opens its own.
    pub(super) fn on_resume(&mut self, out: &mut Vec<Chunk>) {
        out.push(Chunk::Start {
            message_id: self.cfg.message_id.clone(),
            message_metadata: self.cfg.metadata.clone(),
        });
        out.push(Chunk::StartStep);
        self.step_open = true;
        self.resume_step = true;
    }

    /// A call the person denied.
    pub(super) fn on_denied(&mut self, at: &At<'_>, call_id: &str, out: &mut Vec<Chunk>) {
        match self.tools.get(call_id).cloned() {
            Some(ToolOwner::Answer) => out.push(Chunk::ToolOutputDenied {
                tool_call_id: call_id.to_owned(),
            }),
            Some(ToolOwner::Thinking(k)) => self.update_tool(&k, call_id, at.ev.at, out, |v| {
                v["state"] = json!("output-denied");
            }),
            None => {}
        }
    }
}
