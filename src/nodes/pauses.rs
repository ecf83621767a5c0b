//! Tool calls that wait for a person, on an `agent` node:
//!
//! - `approve:` — tools (or partitions) that need a person's approval
//!   before they run. The call is streamed, the run pauses
//!   (`tool-approval-request` on the wire); approved, it runs once; denied,
//!   it never runs and the model is told it was denied.
//! - `client_tools:` — tools the front end runs: a name, a description and
//!   a JSON Schema of the arguments, offered to the model like any other;
//!   the run pauses at a call, and the output the front end sends back
//!   (`addToolOutput`) is the result.
//! - `expires_after:` — how long such a pause waits before the run fails.
//!
//! On resume the node runs again from the top, but nothing is repeated:
//! its model calls and the tool calls that ran before the pause are served
//! from the run's log (see [`Playback`](super::Playback)); only the
//! answered calls do something new.

use std::time::Duration;

use serde_json::{Value, json};

use super::{BuildCx, NodeContext};
use crate::events::{Ask, Interrupt, ToolCallRecord, ToolDef};
use crate::graph::kinds::schema;
use crate::graph::{Reported, SettingDoc};

/// The settings.
pub(super) const SETTINGS: [SettingDoc; 3] = [
    SettingDoc::new(
        "approve",
        schema::NAMES,
        "tools or partitions (among `tools`) that run only once a person approves the call",
    ),
    SettingDoc::new(
        "client_tools",
        schema::MAP,
        "tools the front end runs: name → {description, parameters (JSON Schema)}; the run waits for their output",
    ),
    SettingDoc::new(
        "expires_after",
        schema::DURATION,
        "how long an approval or a client tool's output is waited for before the run fails (default: no limit)",
    ),
];

/// An approval's interrupt id (the AI SDK's `approvalId`) for a tool call.
pub(crate) fn approval_id(call_id: &str) -> String {
    format!("approval-{call_id}")
}

/// What happens to one tool call.
#[derive(Debug)]
pub(super) enum Gate {
    /// It runs as usual.
    Run,
    /// A person denied it (with the reason given): it does not run.
    Denied(Option<String>),
    /// The front end ran it: its output, or its error.
    Client(Result<Value, String>),
    /// It waits for a person.
    Wait(Interrupt),
}

/// An agent's `approve`, `client_tools` and `expires_after`.
#[derive(Debug, Default)]
pub(super) struct Pauses {
    approve: Vec<String>,
    client: Vec<ToolDef>,
    expires: Option<Duration>,
}

impl Pauses {
    /// Reads the settings; `tools` are the node's `tools`.
    pub(super) fn build(cx: &mut BuildCx<'_>, tools: &[String]) -> Result<Self, Reported> {
        let approve = cx.names("approve")?;
        let mut ok = true;
        // Every tool the node offers, as far as `check` knows (the lock
        // file lists MCP servers' tools); `None` when some entry's tools
        // are unknown until a server lists them.
        let offered: Option<Vec<String>> = tools
            .iter()
            .map(|t| cx.tools.members_at_check(t))
            .collect::<Option<Vec<_>>>()
            .map(|m| m.into_iter().flatten().collect());
        for a in &approve {
            let known = match &offered {
                Some(names) => names.contains(&a.value) || tools.contains(&a.value),
                // A partition whose tools are not locked yet: its members
                // are known at run time; approving one of them is fine.
                None => true,
            };
            if !known {
                let names = offered.as_deref().unwrap_or_default();
                let hint = crate::graph::diagnostic::did_you_mean(
                    &a.value,
                    names.iter().map(String::as_str),
                )
                .unwrap_or_else(|| {
                    format!(
                        "the node offers {}; approve one of them, or add the tool to `tools`",
                        names.join(", ")
                    )
                });
                cx.error(
                    a.loc,
                    "invalid-setting",
                    format!(
                        "`{}` is in `approve` but the node does not offer it",
                        a.value
                    ),
                    Some(hint),
                );
                ok = false;
            }
        }
        let client = match cx.json("client_tools") {
            Some(v) => match client_defs(&v.value, tools) {
                Ok(defs) => defs,
                Err(message) => {
                    cx.error(v.loc, "invalid-setting", message, Some(
                        "write `client_tools: {NAME: {description: …, parameters: {type: object, properties: {…}}}}`".into(),
                    ));
                    return Err(Reported);
                }
            },
            None => Vec::new(),
        };
        for d in &client {
            cx.client_tool(&d.name);
        }
        let expires = cx.duration("expires_after")?.map(|d| d.value);
        if !ok {
            return Err(Reported);
        }
        Ok(Self {
            approve: approve.into_iter().map(|a| a.value).collect(),
            client,
            expires,
        })
    }

    /// The client-side tools, offered with the node's other tools.
    pub(super) fn client_defs(&self) -> &[ToolDef] {
        &self.client
    }

    /// What happens to call `tc` with `args`; `offered` are the tools the
    /// model was offered (with their partitions).
    pub(super) fn gate(
        &self,
        cx: &NodeContext<'_>,
        tc: &ToolCallRecord,
        args: &Value,
        offered: &[ToolDef],
    ) -> Gate {
        if self.client.iter().any(|d| d.name == tc.name) {
            return match cx.answer(&tc.id) {
                Some(answer) => Gate::Client(client_result(answer)),
                None => Gate::Wait(cx.interrupt(
                    tc.id.clone(),
                    Ask::ClientTool {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        args: args.clone(),
                    },
                    self.expires,
                )),
            };
        }
        if !self.needs_approval(&tc.name, offered) {
            return Gate::Run;
        }
        let id = approval_id(&tc.id);
        match cx.answer(&id) {
            Some(a) if a["approved"] == true => Gate::Run,
            Some(a) => Gate::Denied(a["reason"].as_str().map(str::to_owned)),
            None => Gate::Wait(cx.interrupt(
                id,
                Ask::Approval {
                    call_id: tc.id.clone(),
                    tool: tc.name.clone(),
                    args: args.clone(),
                },
                self.expires,
            )),
        }
    }

    fn needs_approval(&self, tool: &str, offered: &[ToolDef]) -> bool {
        self.approve.iter().any(|a| {
            a == tool
                || offered
                    .iter()
                    .any(|d| d.name == tool && d.partition.as_deref() == Some(a))
        })
    }
}

/// What the model is told about a denied call.
pub(super) fn denied_content(reason: Option<&str>) -> Value {
    let mut message = "The user denied this tool call; it did not run.".to_owned();
    if let Some(r) = reason.filter(|r| !r.trim().is_empty()) {
        message.push_str(" Reason: ");
        message.push_str(r);
    }
    json!({ "error": { "type": "denied", "message": message } })
}

/// A client tool's answer: `{"output": …}` or `{"error": "…"}`.
fn client_result(answer: Value) -> Result<Value, String> {
    match answer {
        Value::Object(mut m) => match m.remove("error") {
            Some(Value::String(e)) => Err(e),
            Some(other) if !other.is_null() => Err(other.to_string()),
            _ => Ok(m.remove("output").unwrap_or(Value::Null)),
        },
        other => Ok(other),
    }
}

/// The definitions of `client_tools:`.
fn client_defs(v: &Value, tools: &[String]) -> Result<Vec<ToolDef>, String> {
    let Value::Object(map) = v else {
        return Err("`client_tools` must map tool names to their definitions".into());
    };
    let mut defs = Vec::new();
    for (name, def) in map {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!(
                "`{}` is not a tool name (letters, digits, `_`, `-`; at most 64)",
                name.escape_debug()
            ));
        }
        if tools.contains(name) {
            return Err(format!(
                "`{name}` is both in `tools` (runs on the server) and in `client_tools` (runs in the front end)"
            ));
        }
        let description = def["description"].as_str().unwrap_or("").to_owned();
        let parameters = match &def["parameters"] {
            Value::Null => json!({"type": "object", "properties": {}}),
            p @ Value::Object(o) if o.get("type").is_none_or(|t| t == "object") => p.clone(),
            _ => {
                return Err(format!(
                    "the `parameters` of client tool `{name}` must be a JSON Schema of an object"
                ));
            }
        };
        if let Some(extra) = def
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "description" && *k != "parameters"))
        {
            return Err(format!(
                "client tool `{name}` has an unknown key `{extra}` (known: description, parameters)"
            ));
        }
        defs.push(ToolDef {
            name: name.clone(),
            description,
            parameters: parameters.into(),
            partition: None,
        });
    }
    Ok(defs)
}
