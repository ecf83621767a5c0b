//! The listening connection behind
//! [`Maintenance::subscribe`](crate::store::Maintenance::subscribe).
//!
//! Each store keeps one connection outside the pool (`LISTEN` is session
//! state, and a pooled connection goes back to other work) that runs
//! `LISTEN stategraph_events` and turns every notification
//! `<run>:<last_seq>`, sent after each append by any instance, into a
//! broadcast message.
//!
//! When the connection drops (server restart, network failure) a
//! supervising task reconnects with backoff (100 ms doubling to 5 s) and
//! listens again. PostgreSQL queues notifications only for sessions that
//! listen, so **those sent meanwhile are lost**; that, and receivers lagging
//! behind the broadcast, is why subscribers must also poll the log now and
//! then rather than rely on notifications alone.
//!
//! The notification queue is shared by the whole cluster, and a session
//! that listens without reading holds it back until it fills and `NOTIFY`
//! (so every append) fails. This connection reads continuously and never
//! opens a transaction. Poolers in transaction mode (PgBouncer's default)
//! do not support `LISTEN`: point the store at PostgreSQL itself or at a
//! session-mode pool.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};
use tokio_util::sync::{CancellationToken, DropGuard};
use uuid::Uuid;

use crate::store::{Appended, StoreResult};

/// The channel appends are notified on (see the `notify` module).
pub(super) const CHANNEL: &str = "stategraph_events";

const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(5);

/// Connects and listens, then keeps listening in the background until the
/// returned guard is dropped.
///
/// # Errors
/// The first connection or its `LISTEN` fails.
pub(super) async fn start(
    config: Config,
    tx: broadcast::Sender<Appended>,
) -> StoreResult<DropGuard> {
    let session = Session::open(&config, &tx).await?;
    let stop = CancellationToken::new();
    tokio::spawn(supervise(config, tx, session, stop.clone()));
    Ok(stop.drop_guard())
}

/// One listening connection: the client (dropping it ends the session) and
/// the task reading the connection's messages, which ends when it drops.
struct Session {
    _client: Client,
    reader: JoinHandle<()>,
}

impl Session {
    async fn open(config: &Config, tx: &broadcast::Sender<Appended>) -> StoreResult<Self> {
        let (client, mut connection) = config.connect(NoTls).await?;
        let tx = tx.clone();
        // The connection must be polled for `LISTEN` below to complete.
        let reader = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => match parse(n.payload()) {
                        // No subscriber is not an error.
                        Some(appended) => drop(tx.send(appended)),
                        None => {
                            tracing::warn!(
                                payload = n.payload(),
                                "ignoring an unrecognized notification on {CHANNEL}"
                            )
                        }
                    },
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "the PostgreSQL listening connection failed");
                        break;
                    }
                }
            }
        });
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            reader.abort();
            return Err(e.into());
        }
        Ok(Self {
            _client: client,
            reader,
        })
    }
}

/// Waits for the session to end and opens a new one, until stopped.
async fn supervise(
    config: Config,
    tx: broadcast::Sender<Appended>,
    mut session: Session,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                session.reader.abort();
                return;
            }
            _ = &mut session.reader => {}
        }
        tracing::warn!(
            "lost the PostgreSQL listening connection; notifications are missed until it is back"
        );
        let mut delay = FIRST_DELAY;
        session = loop {
            let attempt = async {
                tokio::time::sleep(delay).await;
                Session::open(&config, &tx).await
            };
            let result = tokio::select! {
                () = stop.cancelled() => return,
                result = attempt => result,
            };
            match result {
                Ok(session) => break session,
                Err(e) => {
                    tracing::debug!(error = %e, "reconnecting the PostgreSQL listening connection");
                    delay = (delay * 2).min(MAX_DELAY);
                }
            }
        };
        tracing::info!("listening to PostgreSQL notifications again");
    }
}

/// `<uuid>:<seq>`.
fn parse(payload: &str) -> Option<Appended> {
    let (run, seq) = payload.split_once(':')?;
    Some((Uuid::parse_str(run).ok()?, seq.parse().ok()?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_run_and_seq() {
        let id = Uuid::now_v7();
        assert_eq!(parse(&format!("{id}:42")), Some((id, 42)));
        assert_eq!(parse("nope"), None);
        assert_eq!(parse(&format!("{id}:-1")), None);
    }
}
