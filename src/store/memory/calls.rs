//! Model call records in memory: records per run, parts by hash with
//! their last use (the SQL backends' `model_calls` and `call_parts`).

use futures::future::BoxFuture;
use uuid::Uuid;

use super::{Inner, MemoryStore, ready};
use crate::store::StoreResult;
use crate::store::calls::{CallPart, CallRecord, CallStorage, Calls, ExpiredCalls};

impl Calls for MemoryStore {
    fn add_call(&self, call: CallRecord, parts: Vec<CallPart>) -> BoxFuture<'_, StoreResult<()>> {
        let mut g = self.lock();
        let at = call.created_at;
        for p in parts {
            let slot = g.call_parts.entry(p.hash).or_insert((p.body, at));
            slot.1 = slot.1.max(at);
        }
        g.calls
            .entry(call.run_id)
            .or_default()
            .insert(call.seq, call);
        ready(Ok(()))
    }

    fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<CallRecord>>> {
        let g = self.lock();
        let out = g
            .calls
            .get(&run)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default();
        ready(Ok(out))
    }

    fn call_parts(&self, hashes: Vec<String>) -> BoxFuture<'_, StoreResult<Vec<CallPart>>> {
        let g = self.lock();
        let out = hashes
            .into_iter()
            .filter_map(|hash| {
                let body = g.call_parts.get(&hash)?.0.clone();
                Some(CallPart { hash, body })
            })
            .collect();
        ready(Ok(out))
    }

    fn expire_calls(&self, before: u64) -> BoxFuture<'_, StoreResult<ExpiredCalls>> {
        ready(Ok(expire(&mut self.lock(), before)))
    }

    fn call_storage(&self) -> BoxFuture<'_, StoreResult<CallStorage>> {
        let g = self.lock();
        let mut s = CallStorage::default();
        for c in g.calls.values().flat_map(|c| c.values()) {
            s.calls += 1;
            s.record_bytes += c.request.to_string().len() as u64;
        }
        for (body, _) in g.call_parts.values() {
            s.parts += 1;
            s.part_bytes += body.len() as u64;
        }
        ready(Ok(s))
    }
}

/// Marks the records made before `before` expired and forgets the parts
/// last used before it.
pub(super) fn expire(g: &mut Inner, before: u64) -> ExpiredCalls {
    let mut report = ExpiredCalls::default();
    for c in g.calls.values_mut().flat_map(|c| c.values_mut()) {
        if !c.expired && c.created_at < before {
            c.expired = true;
            report.calls += 1;
        }
    }
    let n = g.call_parts.len();
    g.call_parts.retain(|_, (_, used)| *used >= before);
    report.parts = (n - g.call_parts.len()) as u64;
    report
}
