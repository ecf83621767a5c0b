//! An endpoint's HTTP clients: a *set* of `reqwest::Client`s, each its own
//! pool. Over HTTP/2 a client holds one connection to the server, so a call
//! goes to the client with the fewest calls in flight among those under the
//! per-connection stream cap, and another client (so another connection)
//! is made when all are at the cap. A connection the server ends (GOAWAY,
//! reset, close) then fails only the calls on it; the next attempt picks
//! again, and a client whose connection died opens a new one. Over
//! HTTP/1.1 a client's pool already opens a connection per call in flight;
//! the cap only spreads the calls over more pools.
//!
//! Each client must be its own pool: hyper-util's pool keeps one h2
//! connection per host and waits on it while it is being opened, so one
//! client never opens a second h2 connection to the same server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One client and the calls in flight on it.
struct Slot {
    client: reqwest::Client,
    in_flight: AtomicUsize,
}

/// The clients of an endpoint.
pub(super) struct Connections {
    /// The client made with the set (also in `slots`).
    first: Arc<Slot>,
    slots: Mutex<Vec<Arc<Slot>>>,
    /// Calls per client before another is made.
    cap: usize,
    /// Makes another client like the first.
    builder: Box<dyn Fn() -> reqwest::Result<reqwest::Client> + Send + Sync>,
}

/// A call's claim on a client: counted in flight until dropped, so the
/// call's response body must hold it.
pub(super) struct Lease {
    slot: Arc<Slot>,
}

impl Lease {
    /// The client to send with.
    pub(super) fn client(&self) -> &reqwest::Client {
        &self.slot.client
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Connections {
    /// The set with its first client, built now (so a client that cannot be
    /// built is an error at start-up, not at the first call).
    pub(super) fn new(
        cap: usize,
        builder: Box<dyn Fn() -> reqwest::Result<reqwest::Client> + Send + Sync>,
    ) -> reqwest::Result<Self> {
        let first = Arc::new(Slot {
            client: builder()?,
            in_flight: AtomicUsize::new(0),
        });
        Ok(Self {
            slots: Mutex::new(vec![Arc::clone(&first)]),
            first,
            cap: cap.max(1),
            builder,
        })
    }

    /// The client for the next call: the least busy one under the cap, or a
    /// new one when every one is at it. If a new client cannot be built
    /// (it was built once already, so this is not expected) the least busy
    /// one takes the call over its cap (h2 queues it for a stream). The set
    /// never shrinks: an idle client's connection closes after the pool's
    /// idle timeout, and the client itself is small.
    pub(super) fn lease(&self) -> Lease {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let least = slots
            .iter()
            .min_by_key(|s| s.in_flight.load(Ordering::Relaxed))
            .map(Arc::clone);
        let slot = match least {
            Some(s) if s.in_flight.load(Ordering::Relaxed) < self.cap => s,
            least => match (self.builder)() {
                Ok(client) => {
                    let slot = Arc::new(Slot {
                        client,
                        in_flight: AtomicUsize::new(0),
                    });
                    slots.push(Arc::clone(&slot));
                    slot
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot make another HTTP/2 connection; over the stream cap");
                    least.unwrap_or_else(|| Arc::clone(&self.first))
                }
            },
        };
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        Lease { slot }
    }

    /// Any client, for building requests (a request is sent by its lease's).
    pub(super) fn any(&self) -> &reqwest::Client {
        &self.first.client
    }

    /// How many clients (h2 connections, once used) the set holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn set(cap: usize) -> Connections {
        Connections::new(cap, Box::new(|| reqwest::Client::builder().build())).unwrap()
    }

    #[test]
    fn a_client_per_cap_of_calls_and_the_least_busy_first() {
        let conns = set(2);
        let a = conns.lease();
        let b = conns.lease();
        assert_eq!(conns.len(), 1, "two calls fit the first client");
        let c = conns.lease();
        assert_eq!(conns.len(), 2, "the third opens another");
        drop(a);
        drop(b);
        // The first is now idle, the second has one call: the first is chosen.
        let d = conns.lease();
        assert!(Arc::ptr_eq(&d.slot, &conns.slots.lock().unwrap()[0]));
        drop((c, d));
        assert_eq!(conns.len(), 2);
    }

    #[test]
    fn leases_count_in_flight_until_dropped() {
        let conns = set(3);
        let leases: Vec<_> = (0..7).map(|_| conns.lease()).collect();
        let counts: Vec<_> = conns
            .slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.in_flight.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts, vec![3, 3, 1]);
        drop(leases);
        assert!(
            conns
                .slots
                .lock()
                .unwrap()
                .iter()
                .all(|s| s.in_flight.load(Ordering::Relaxed) == 0)
        );
    }
}
