//! Conformance checks for `LogCheckpointer` through outages, on top of every
//! backend: transient failures are retried with backoff, a lost reply is not
//! a failure, real errors are not retried, and an outage longer than the
//! limit fails with a clear message.

use std::time::{Duration, Instant};

use super::flaky::{Fault, Flaky};
use super::*;

fn texts(run: Uuid, seqs: std::ops::RangeInclusive<u64>, step: u32) -> Vec<Arc<Event>> {
    seqs.map(|s| text(run, s, step)).collect()
}

pub(super) async fn the_checkpointer_rides_out_outages_and_lost_replies(store: Arc<dyn Store>) {
    let flaky = Flaky::new(Arc::clone(&store));
    let cp = LogCheckpointer::new(flaky.clone()).with_outage_limit(Duration::from_secs(20));
    assert_eq!(cp.outage_limit(), Duration::from_secs(20));
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    let mut sent = Vec::new();
    let mut save = async |b: StepBatch| {
        sent.extend(b.events.iter().cloned());
        cp.save(b).await
    };

    save(batch(r.id, 0, texts(r.id, 1..=3, 0))).await.unwrap();
    assert_eq!(flaky.attempts(), 1);

    flaky.inject([Fault::Unavailable, Fault::Unavailable, Fault::Unavailable]);
    let started = Instant::now();
    save(batch(r.id, 1, texts(r.id, 4..=6, 1))).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "backoff 100 + 200 + 400 ms: {:?}",
        started.elapsed()
    );
    assert_eq!(flaky.attempts(), 1 + 4);

    flaky.inject([Fault::ReplyLost]);
    save(batch(r.id, 2, texts(r.id, 7..=9, 2))).await.unwrap();
    assert_eq!(
        flaky.attempts(),
        5 + 2,
        "one retry, which found the batch stored"
    );

    flaky.inject([Fault::ReplyLost, Fault::Unavailable]);
    save(batch(r.id, 3, texts(r.id, 10..=10, 3))).await.unwrap();

    let mut last = batch(
        r.id,
        3,
        vec![event(
            r.id,
            11,
            3,
            EventKind::RunFinished {
                steps: 3,
                usage: Usage::default(),
            },
        )],
    );
    last.status = RunStatus::Finished;
    flaky.inject([Fault::ReplyLost]);
    save(last).await.unwrap();

    assert_eq!(
        all_events(&*store, r.id).await,
        owned(&sent),
        "every event stored once, in order, without gaps"
    );
    let stored = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.last_seq, stored.last_step),
        (RunStatus::Finished, 11, 3)
    );
}

pub(super) async fn the_checkpointer_fails_on_real_errors_and_long_outages(store: Arc<dyn Store>) {
    let flaky = Flaky::new(Arc::clone(&store));
    let cp = LogCheckpointer::new(flaky.clone()).with_outage_limit(Duration::from_secs(20));
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    cp.save(batch(r.id, 0, texts(r.id, 1..=2, 0)))
        .await
        .unwrap();

    // Between two attempts another writer stored different events with the
    // same seqs: the retry's conflict is real.
    let theirs = event(
        r.id,
        3,
        1,
        EventKind::Thinking {
            text: "another instance".into(),
        },
    );
    flaky.inject([Fault::Raced(batch(r.id, 1, vec![theirs.clone()]))]);
    let e = cp
        .save(batch(r.id, 1, texts(r.id, 3..=3, 1)))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("conflict"), "{e}");

    let before = flaky.attempts();
    let e = cp
        .save(batch(r.id, 2, texts(r.id, 3..=3, 2)))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("conflict"), "{e}");
    assert_eq!(
        flaky.attempts(),
        before + 1,
        "a conflict on a first attempt is not retried"
    );

    flaky.inject([Fault::Backend]);
    let e = cp
        .save(batch(r.id, 2, texts(r.id, 4..=4, 2)))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("injected: cannot encode"), "{e}");
    assert_eq!(
        flaky.attempts(),
        before + 2,
        "a non-transient error is not retried"
    );

    let short = LogCheckpointer::new(flaky.clone()).with_outage_limit(Duration::from_millis(600));
    flaky.set_down(true);
    let started = Instant::now();
    let e = short
        .save(batch(r.id, 2, texts(r.id, 4..=4, 2)))
        .await
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(
        e.starts_with("checkpoint store: the store has been unavailable for 600ms: store unavailable: injected"),
        "{e}"
    );
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        flaky.attempts() >= before + 2 + 3,
        "retried until the limit"
    );
    flaky.set_down(false);

    let stored = all_events(&*store, r.id).await;
    assert_eq!(stored.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(stored[2], *theirs, "the other writer's event stands");
}
