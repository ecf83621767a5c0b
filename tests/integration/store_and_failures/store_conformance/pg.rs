//! PostgreSQL checks that need more than one store, or an outage: several
//! instances sharing a database, and the database going away mid-run
//! (through a proxy, so the server other tests use stays up).

use std::time::{Duration, Instant};

use super::leases::claim_in_parallel;
use super::proxy::Proxy;
use super::upkeep::next;
use super::*;
use stategraph::internals::store::{Maintenance, RunStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notifications_reach_every_instance_on_the_database() {
    PgDb::with(|url| async move {
        let a = PostgresStore::connect(&url, 2).await.unwrap();
        let b = PostgresStore::connect(&url, 2).await.unwrap();
        let (mut from_a, mut from_b) = (a.subscribe(), b.subscribe());
        let r = run(None, 1);
        a.create_run(r.clone()).await.unwrap();
        a.append(&batch(r.id, 0, (1..=4).map(|s| text(r.id, s, 0)).collect()))
            .await
            .unwrap();
        assert_eq!(
            next(&mut from_b).await,
            (r.id, 4),
            "the other instance hears it"
        );
        assert_eq!(next(&mut from_a).await, (r.id, 4), "and so does the writer");
        b.append(&batch(r.id, 1, vec![text(r.id, 5, 1)]))
            .await
            .unwrap();
        assert_eq!(next(&mut from_a).await, (r.id, 5));
        assert_eq!(next(&mut from_b).await, (r.id, 5));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_claimers_on_two_instances_never_get_the_same_run() {
    PgDb::with(|url| async move {
        let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url, 4).await.unwrap());
        let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url, 4).await.unwrap());
        claim_in_parallel(a, b, 50).await;
    })
    .await;
}

/// Saves batches of three events with consecutive seqs; remembers them.
struct Writer {
    cp: LogCheckpointer,
    run: Uuid,
    sent: Vec<Arc<Event>>,
}

impl Writer {
    fn next_batch(&self, step: u32, delta: Option<&str>) -> StepBatch {
        let first = self.sent.len() as u64 + 1;
        let mut events: Vec<_> = (first..first + 3)
            .map(|s| text(self.run, s, step))
            .collect();
        if let Some(delta) = delta {
            events[2] = event(
                self.run,
                first + 2,
                step,
                EventKind::TextDelta {
                    call: 0,
                    delta: delta.into(),
                },
            );
        }
        batch(self.run, step, events)
    }

    async fn save(&mut self, b: StepBatch) -> Result<(), CheckpointError> {
        let events = b.events.clone();
        self.cp.save(b).await?;
        self.sent.extend(events);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_mid_run_is_retried_and_loses_nothing() {
    PgDb::with(|url| async move {
        let proxy = Proxy::start().await;
        let store: Arc<dyn Store> =
            Arc::new(PostgresStore::connect(&proxy.url(&url), 4).await.unwrap());
        let r = run(None, 1);
        store.create_run(r.clone()).await.unwrap();
        let cp =
            LogCheckpointer::new(Arc::clone(&store)).with_outage_limit(Duration::from_secs(30));
        let mut w = Writer {
            cp,
            run: r.id,
            sent: Vec::new(),
        };
        for step in 0..3 {
            w.save(w.next_batch(step, None)).await.unwrap();
        }

        // The database goes away for 1.5 s: saves wait, then succeed.
        proxy.cut().await;
        let p = proxy.clone();
        let restorer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            p.restore().await;
        });
        let started = Instant::now();
        w.save(w.next_batch(3, None)).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(1_400),
            "the save waited for the restore: {:?}",
            started.elapsed()
        );
        restorer.await.unwrap();
        w.save(w.next_batch(4, None)).await.unwrap();

        // An append commits but its reply is lost with the connection: the
        // bare store reports the store unavailable although the events are in.
        let probe = Uuid::now_v7();
        proxy.lose_reply_to("lost-reply-probe", Duration::from_millis(300));
        let lost = store
            .append(&batch(
                probe,
                0,
                vec![event(
                    probe,
                    1,
                    0,
                    EventKind::Thinking {
                        text: "lost-reply-probe".into(),
                    },
                )],
            ))
            .await;
        assert!(matches!(lost, Err(StoreError::Unavailable(_))), "{lost:?}");
        let landed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok(events) = store.events(probe, 0, 10).await {
                    return events;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        assert_eq!(landed.await.unwrap().len(), 1, "the append committed");
        // The checkpointer's retry then conflicts with its own events: a success.
        proxy.lose_reply_to("lost-reply-marker", Duration::from_millis(500));
        w.save(w.next_batch(5, Some("lost-reply-marker")))
            .await
            .unwrap();
        assert_eq!(
            proxy.replies_lost(),
            2,
            "the reply to the marked append was dropped"
        );
        w.save(w.next_batch(6, None)).await.unwrap();

        let stored = all_events(&*store, r.id).await;
        assert_eq!(
            stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=21).collect::<Vec<_>>(),
            "gapless"
        );
        assert_eq!(stored, owned(&w.sent), "every event stored once, as sent");
        assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_step, 6);

        // The listening connection came back too: an append now is heard.
        let mut rx = store.subscribe();
        let heard = async {
            loop {
                let probe = Uuid::now_v7();
                store
                    .append(&batch(probe, 0, vec![text(probe, 1, 0)]))
                    .await
                    .unwrap();
                let wait = tokio::time::timeout(Duration::from_millis(300), async {
                    loop {
                        match rx.recv().await {
                            Ok((id, _)) if id == probe => return,
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
                if wait.await.is_ok() {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), heard)
            .await
            .expect("notifications resume after the outage");

        // Past the outage limit, the save fails and says why.
        proxy.cut().await;
        let short =
            LogCheckpointer::new(Arc::clone(&store)).with_outage_limit(Duration::from_secs(1));
        let started = Instant::now();
        let e = short
            .save(w.next_batch(7, None))
            .await
            .unwrap_err()
            .to_string();
        let took = started.elapsed();
        assert!(
            e.contains("the store has been unavailable for 1s: store unavailable: "),
            "{e}"
        );
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(15),
            "{took:?}"
        );
        proxy.restore().await;
        let back = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok(events) = store.events(r.id, 0, usize::MAX).await {
                    return events;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the pool recovers once the server is back");
        assert_eq!(back.len(), 21, "the failed save stored nothing");
    })
    .await;
}
