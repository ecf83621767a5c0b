//! Human in the loop: an agent that must get the user's approval before it
//! deletes a record, served with the tools it calls.
//!
//! ```text
//! cargo run --example approval -- --config examples/approval/stategraph.toml serve
//! cargo run --example approval -- --config examples/approval/stategraph.toml run approval "delete record 42"
//! cargo run --example approval -- --config examples/approval/stategraph.toml resume RUN --value '{"approved": true}'
//! ```
//!
//! With the built-in offline model, the message `delete record 42` makes the
//! agent call `delete_record` with `{"id": 42}`. The graph file
//! (`graphs/approval.yaml`) lists `delete_record` under `approve:`, so the
//! run pauses there: the stream ends with the call's tool part and a
//! `tool-approval-request`, and the run waits (status `interrupted`). A
//! `useChat` front end shows the request; `addToolApprovalResponse` and its
//! automatic resend continue the run — approved, the record is deleted once
//! and the result streams into the same message; denied, nothing is deleted
//! and the model is told so. Without a front end: `POST
//! /api/runs/{id}/resume` with `{"value": {"approved": true}}`, or the
//! `resume` command above.
//!
//! The two tools are an application's own, registered through the public
//! API; the records live in memory (ids 1–100) so the example needs
//! nothing else.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use stategraph::{Registries, Tool, ToolError, ToolPolicy, ToolSpec};

fn main() -> ExitCode {
    let registries = Registries::default();
    let records = Arc::new(Mutex::new((1..=100).collect::<BTreeSet<u64>>()));
    for tool in [
        Records::lookup(Arc::clone(&records)),
        Records::delete(records),
    ] {
        if let Err(e) = registries.tools.register(Arc::new(tool)) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    stategraph::cli::App::new(registries)
        .graphs_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/approval/graphs"
        ))
        .prompts_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/approval/prompts"
        ))
        .main()
}

/// `lookup_record` or `delete_record` over the same in-memory table.
struct Records {
    spec: ToolSpec,
    ids: Arc<Mutex<BTreeSet<u64>>>,
    deletes: bool,
}

impl Records {
    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: Arc::new(json!({
                "type": "object",
                "properties": {"id": {"type": "integer", "minimum": 1}},
                "required": ["id"],
                "additionalProperties": false
            })),
            output_schema: None,
            partition: "records".into(),
            // The default policy caches nothing: a deletion reaches the table.
            policy: ToolPolicy::default(),
        }
    }

    fn lookup(ids: Arc<Mutex<BTreeSet<u64>>>) -> Self {
        Self {
            spec: Self::spec("lookup_record", "Show one record by id."),
            ids,
            deletes: false,
        }
    }

    fn delete(ids: Arc<Mutex<BTreeSet<u64>>>) -> Self {
        Self {
            spec: Self::spec(
                "delete_record",
                "Delete one record by id, for good. Needs the user's approval.",
            ),
            ids,
            deletes: true,
        }
    }
}

impl Tool for Records {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let id = args["id"].as_u64().unwrap_or(0);
            let mut ids = self
                .ids
                .lock()
                .map_err(|_| ToolError::Execution("the record table is unavailable".into()))?;
            if !ids.contains(&id) {
                return Err(ToolError::Execution(format!("there is no record {id}")));
            }
            if self.deletes {
                ids.remove(&id);
                Ok(json!({ "deleted": id, "remaining": ids.len() }))
            } else {
                Ok(json!({ "id": id, "title": format!("Record {id}") }))
            }
        })
    }
}
