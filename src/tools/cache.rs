//! The tool result cache: successful results by tool and arguments, each
//! kept for its tool's TTL. Bounded: past the limit the oldest entry goes.
//! Time comes from tokio's clock, so tests can advance it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::Value;
use tokio::time::{Duration, Instant};

/// Entries kept at most.
const LIMIT: usize = 4096;

#[derive(Debug, Default)]
pub(super) struct ToolCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, (Instant, Value)>,
    order: VecDeque<String>,
}

/// The cache key: tool name and arguments as canonical JSON (object keys
/// are sorted by serde_json's map).
pub(super) fn key(tool: &str, args: &Value) -> String {
    format!("{tool}\u{0}{args}")
}

impl ToolCache {
    pub(super) fn get(&self, key: &str) -> Option<Value> {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match g.map.get(key) {
            Some((expires, v)) if *expires > Instant::now() => Some(v.clone()),
            Some(_) => {
                g.map.remove(key);
                None
            }
            None => None,
        }
    }

    pub(super) fn put(&self, key: String, value: Value, ttl: Duration) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if g.map
            .insert(key.clone(), (Instant::now() + ttl, value))
            .is_none()
        {
            g.order.push_back(key);
        }
        if g.order.len() > 2 * LIMIT {
            // Expired keys linger in the order list; drop them.
            let Inner { map, order } = &mut *g;
            order.retain(|k| map.contains_key(k));
        }
        while g.map.len() > LIMIT {
            match g.order.pop_front() {
                Some(old) => {
                    g.map.remove(&old);
                }
                None => break,
            }
        }
    }
}
