//! Model calls as they were sent (`GET /api/runs/{id}/calls`, `stategraph
//! replay RUN --calls`, the studio's Calls tab).
//!
//! The event log keeps what a model answered (`llm_finished`) but only a
//! fingerprint of what it was asked. A call record keeps the request: the
//! messages after templating, the tools offered, the response format and
//! the settings. A chat's history grows by a turn at a time and every call
//! sends all of it, so the content is stored by address: each message,
//! tool definition and response format is a [`CallPart`] stored once under
//! the hash of its text, and a [`CallRecord`] lists the hashes. A 40-turn
//! chat stores its history once, not 40 times.
//!
//! Content is kept for less time than runs when a retention is set:
//! [`Calls::expire_calls`] marks older records `expired` and deletes the
//! parts no newer record uses (each part notes when a record last used it,
//! so no reference counts are kept). The records stay, with their model,
//! settings and place in the run; the answer stays in the event log.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{StoreError, StoreResult};

/// One model call's request, without its content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The run.
    pub run_id: Uuid,
    /// The seq of the call's `llm_started` event (unique in the run).
    pub seq: u64,
    /// When it was recorded, µs since the epoch.
    pub created_at: u64,
    /// Whether its content expired (its parts may be gone).
    pub expired: bool,
    /// Where and how it was made: node, step, task, call, role, model,
    /// endpoint, settings, and the hashes of its parts (the shape is
    /// `llm::record`'s).
    pub request: Value,
}

/// A piece of call content, stored once under its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallPart {
    /// xxh3-128 of `body`, 32 hex digits.
    pub hash: String,
    /// JSON text (a message, a tool definition, a response format).
    pub body: String,
}

/// What [`Calls::expire_calls`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExpiredCalls {
    /// Records marked expired.
    pub calls: u64,
    /// Parts deleted.
    pub parts: u64,
}

/// How much the call records take (the bound a test holds them to).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CallStorage {
    /// Records.
    pub calls: u64,
    /// Bytes of their request JSON.
    pub record_bytes: u64,
    /// Distinct parts.
    pub parts: u64,
    /// Bytes of the parts' bodies.
    pub part_bytes: u64,
}

/// Model call records. A store without them (a test double) keeps none:
/// the defaults store nothing and find nothing.
pub trait Calls: Send + Sync {
    /// Stores a call record and its parts (a part already stored is kept
    /// once; its last use becomes the record's `created_at`), in one
    /// transaction.
    fn add_call(&self, call: CallRecord, parts: Vec<CallPart>) -> BoxFuture<'_, StoreResult<()>> {
        let _ = (call, parts);
        Box::pin(async { Ok(()) })
    }
    /// A run's call records in seq order.
    fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<CallRecord>>> {
        let _ = run;
        Box::pin(async { Ok(Vec::new()) })
    }
    /// The stored parts among `hashes` (missing ones are left out).
    fn call_parts(&self, hashes: Vec<String>) -> BoxFuture<'_, StoreResult<Vec<CallPart>>> {
        let _ = hashes;
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Marks records made before `before` expired and deletes the parts
    /// last used before it.
    fn expire_calls(&self, before: u64) -> BoxFuture<'_, StoreResult<ExpiredCalls>> {
        let _ = before;
        Box::pin(async { Ok(ExpiredCalls::default()) })
    }
    /// The records' and parts' sizes.
    fn call_storage(&self) -> BoxFuture<'_, StoreResult<CallStorage>> {
        Box::pin(async {
            Err(StoreError::Backend(
                "this store keeps no call records".into(),
            ))
        })
    }
}
