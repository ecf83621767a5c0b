//! The store conformance suite: one set of checks over `Arc<dyn Store>`,
//! run against the memory store (the reference), SQLite in a temporary
//! directory, and PostgreSQL in a fresh database per test
//! (`stategraph_test_<random>` on 127.0.0.1:5432, dropped afterwards), so
//! tests run in parallel and repeatedly. The checks cover chats, runs, the
//! event log, leases, pruning, notifications, judge verdicts, model call records, and `LogCheckpointer` riding
//! out outages (with a fault-injecting wrapper, `flaky`) and a real graph
//! run. Then backend-specific checks: migrations, refusing a newer schema,
//! future event kinds, configuration, and on PostgreSQL several instances
//! on one database and an outage simulated by a TCP proxy (`proxy`, `pg`).
//! A real server restart is `tests/pg_restart.rs`, its own binary, run
//! alone because it would disturb every other test using the server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::support::ChatState;
use crate::support::db::{Backend, PgDb, with_store};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use stategraph::internals::events::{
    ErrorInfo, Event, EventKind, ForkOrigin, LlmOutput, ToolCallRecord, ToolFailure, Usage,
};
use stategraph::internals::runs::LogCheckpointer;
use stategraph::internals::runtime::{
    self, CheckpointError, Checkpointer, MemoryCheckpointer, PendingTask, RunOptions, RunStatus,
    StepBatch, TaskWrite, rebuild_state,
};
use stategraph::internals::store::{
    self, ChatRecord, CheckpointRecord, EventLog, MessageRecord, PostgresStore, RunCursor,
    RunQuery, RunRecord, SqliteStore, Store, StoreConfig, StoreError,
};
use stategraph::state::{Patch, StateType};
use uuid::Uuid;

mod backends;
mod calls;
mod chats;
mod flaky;
mod graph_run;
mod group;
mod leases;
mod log;
mod outage;
mod pg;
mod proxy;
mod recent;
mod upkeep;
mod verdicts;

use calls::*;
use chats::*;
use graph_run::*;
use leases::*;
use log::*;
use outage::*;
use upkeep::*;
use verdicts::*;

/// One test per check and backend: `store_conformance::<backend>::<check>`.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() { super::with_store(super::Backend::Memory, super::$check).await })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() { super::with_store(super::Backend::Sqlite, super::$check).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() { super::with_store(super::Backend::Postgres, super::$check).await })*
        }
    };
}

conformance!(
    chats_are_ensured_listed_and_deleted,
    newest_run_status_by_chat_reads_each_chats_newest_run,
    chat_metadata_is_stored_per_user_and_goes_with_its_chat,
    active_run_is_set_and_cleared,
    messages_append_regenerate_edit_and_upsert,
    a_turn_ends_with_its_message_its_run_and_its_chat,
    runs_are_created_listed_and_finished,
    runs_are_filtered_and_paged_in_the_store,
    usage_is_summed_per_user_since_a_time,
    events_page_and_checkpoints_filter_by_step,
    a_duplicate_seq_conflicts_and_stores_nothing_of_its_batch,
    the_final_batch_sets_the_status,
    steps_appended_together_land_together,
    events_stored_ahead_of_their_checkpoint_read_as_one_log,
    streamed_events_advance_the_runs_last_seq_everywhere,
    concurrent_event_appends_land_and_a_conflict_fails_alone,
    state_rebuilt_from_stored_checkpoints_matches_memory,
    large_unicode_and_every_kind_of_event_round_trip,
    concurrent_appends_to_different_runs_all_land,
    a_real_graph_run_checkpoints_through_the_store,
    a_real_graph_run_survives_lost_replies_and_outages,
    leases_are_acquired_renewed_expire_and_are_released,
    a_run_created_leased_is_never_an_orphan_while_its_lease_lasts,
    finishing_a_run_clears_its_lease,
    stop_requests_reach_the_lease_owner,
    orphans_are_running_runs_with_an_expired_or_no_lease,
    concurrent_claimers_never_get_the_same_run,
    paused_runs_are_claimed_by_exactly_one_resume,
    prune_deletes_old_finished_runs_and_idle_chats,
    prune_works_through_more_runs_than_one_batch,
    releasing_memory_while_busy_loses_nothing,
    subscribers_hear_every_committed_append,
    the_checkpointer_rides_out_outages_and_lost_replies,
    the_checkpointer_fails_on_real_errors_and_long_outages,
    verdicts_are_kept_per_run_and_pruned_with_it,
    call_parts_are_stored_once_and_expire_by_last_use,
    call_records_made_at_once_share_parts,
);

// ---------------------------------------------------------------- fixtures

fn chat(id: &str, user: &str, updated_at: u64) -> ChatRecord {
    ChatRecord {
        id: id.into(),
        user_id: user.into(),
        title: format!("title of {id}"),
        created_at: 1,
        updated_at,
        active_run: None,
    }
}

fn message(chat: &str, id: &str, position: i64, text: &str) -> MessageRecord {
    let role = if position % 2 == 0 {
        "user"
    } else {
        "assistant"
    };
    MessageRecord {
        chat_id: chat.into(),
        id: id.into(),
        role: role.into(),
        parts: json!([{"type": "text", "text": text}]),
        metadata: if position % 2 == 0 {
            Value::Null
        } else {
            json!({"model": "m", "tokens": 12})
        },
        position,
        created_at: 100 + position as u64,
    }
}

fn run(chat: Option<&str>, created_at: u64) -> RunRecord {
    RunRecord {
        id: Uuid::now_v7(),
        chat_id: chat.map(Into::into),
        user_id: "alice".into(),
        graph: "chat".into(),
        graph_version: "v1".into(),
        status: RunStatus::Running,
        input: json!({"query": "why 42?", "n": 1.5}),
        created_at,
        finished_at: None,
        error: None,
        usage: Usage::default(),
        parent: None,
        request_id: Some("req-1".into()),
        message_id: Some("msg-1".into()),
        last_seq: 0,
        last_step: 0,
    }
}

fn event(run: Uuid, seq: u64, step: u32, kind: EventKind) -> Arc<Event> {
    let node = (step > 0).then(|| Arc::from(format!("node{step}").as_str()));
    Arc::new(Event {
        run_id: run,
        seq,
        at: 1_700_000_000_000_000 + seq,
        step,
        node,
        task: (seq % 3) as u32,
        event: kind,
    })
}

fn text(run: Uuid, seq: u64, step: u32) -> Arc<Event> {
    event(
        run,
        seq,
        step,
        EventKind::TextDelta {
            call: 0,
            delta: format!("tok{seq} "),
        },
    )
}

/// A batch for `step` holding `events`, with a patch that keeps its field
/// order (`b` before `a`), a frontier and join progress.
fn batch(run: Uuid, step: u32, events: Vec<Arc<Event>>) -> StepBatch {
    let patch = Patch::new()
        .set("answer", format!("answer {step}"))
        .set("findings", format!("f{step}"));
    StepBatch {
        run_id: run,
        step,
        writes: if step == 0 {
            Vec::new()
        } else {
            vec![TaskWrite {
                node: format!("node{step}"),
                task: 0,
                patch,
            }]
        },
        events,
        next: vec![
            PendingTask {
                node: "narrator".into(),
                item: None,
            },
            PendingTask {
                node: "map".into(),
                item: Some(json!({"i": step})),
            },
        ],
        joins: vec![vec!["a".into(), "b".into()], vec![]],
        snapshot: (step == 0).then(|| json!({"query": "why 42?"})),
        status: RunStatus::Running,
    }
}

async fn all_events(store: &dyn Store, run: Uuid) -> Vec<Event> {
    store.events(run, 0, usize::MAX).await.unwrap()
}

fn owned(events: &[Arc<Event>]) -> Vec<Event> {
    events.iter().map(|e| (**e).clone()).collect()
}
