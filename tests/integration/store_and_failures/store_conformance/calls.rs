//! Conformance checks for model call records: a part is stored once
//! however many records list it (its last use advances), records read back
//! in seq order per run, expiry marks old records and deletes only the
//! parts no newer record used, and pruning a run takes its records.

use super::*;
use stategraph::internals::store::{CallPart, CallRecord};

fn part(body: &str) -> CallPart {
    CallPart {
        hash: stategraph::internals::runs::calls::hash_of(body),
        body: body.into(),
    }
}

fn record(run: Uuid, seq: u64, at: u64, parts: &[&CallPart]) -> CallRecord {
    CallRecord {
        run_id: run,
        seq,
        created_at: at,
        expired: false,
        request: json!({"node": "n", "model": "m", "parts": parts.iter().map(|p| &p.hash).collect::<Vec<_>>()}),
    }
}

pub(super) async fn call_parts_are_stored_once_and_expire_by_last_use(store: Arc<dyn Store>) {
    let old = run(None, 1);
    store.create_run(old.clone()).await.unwrap();
    store
        .finish_run(old.id, RunStatus::Finished, None, Usage::default())
        .await
        .unwrap();
    let system = part(r#"{"role":"system","content":"Be brief — ünïcödé ✓"}"#);
    let first = part(r#"{"role":"user","content":"first"}"#);
    let second = part(r#"{"role":"user","content":"second"}"#);
    let a = record(old.id, 5, 100, &[&system, &first]);
    let b = record(old.id, 3, 200, &[&system, &first, &second]);
    store
        .add_call(a.clone(), vec![system.clone(), first.clone()])
        .await
        .unwrap();
    store
        .add_call(
            b.clone(),
            vec![system.clone(), first.clone(), second.clone()],
        )
        .await
        .unwrap();
    assert_eq!(
        store.calls(old.id).await.unwrap(),
        vec![b.clone(), a.clone()],
        "by seq"
    );
    assert!(store.calls(Uuid::now_v7()).await.unwrap().is_empty());
    let size = store.call_storage().await.unwrap();
    assert_eq!((size.calls, size.parts), (2, 3), "each part once");
    let bytes = (system.body.len() + first.body.len() + second.body.len()) as u64;
    assert_eq!(size.part_bytes, bytes);
    let mut got = store
        .call_parts(vec![
            second.hash.clone(),
            "0".repeat(32),
            system.hash.clone(),
        ])
        .await
        .unwrap();
    got.sort_by(|x, y| x.hash.cmp(&y.hash));
    let mut want = vec![second.clone(), system.clone()];
    want.sort_by(|x, y| x.hash.cmp(&y.hash));
    assert_eq!(got, want, "the stored ones among those asked");

    // Expire before 150: record a (at 100) is marked; every part was last
    // used by b (at 200), so none goes.
    let r = store.expire_calls(150).await.unwrap();
    assert_eq!((r.calls, r.parts), (1, 0));
    let calls = store.calls(old.id).await.unwrap();
    assert_eq!(
        calls.iter().map(|c| (c.seq, c.expired)).collect::<Vec<_>>(),
        vec![(3, false), (5, true)]
    );
    // Expire before 250: b is marked and its parts go.
    let r = store.expire_calls(250).await.unwrap();
    assert_eq!((r.calls, r.parts), (1, 3));
    assert!(
        store
            .call_parts(vec![system.hash.clone()])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.calls(old.id).await.unwrap().len(),
        2,
        "the records stay"
    );

    // Pruning the run takes its records.
    store.prune(2, false).await.unwrap();
    assert!(store.calls(old.id).await.unwrap().is_empty());
    assert_eq!(store.call_storage().await.unwrap().calls, 0);
}

/// Records made at once (on PostgreSQL they share a statement) sharing
/// parts: every record is stored, each part once, its last use the newest
/// record's.
pub(super) async fn call_records_made_at_once_share_parts(store: Arc<dyn Store>) {
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    let system = part(r#"{"role":"system","content":"shared"}"#);
    let own: Vec<CallPart> = (0..20).map(|i| part(&format!("{{\"n\":{i}}}"))).collect();
    let adds = own.iter().enumerate().map(|(i, p)| {
        let rec = record(r.id, i as u64 + 1, 1_000 + i as u64, &[&system, p]);
        let (store, parts) = (Arc::clone(&store), vec![system.clone(), p.clone()]);
        async move { store.add_call(rec, parts).await }
    });
    let results = futures::future::join_all(adds).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(store.calls(r.id).await.unwrap().len(), 20);
    assert_eq!(
        store.call_storage().await.unwrap().parts,
        21,
        "each part once"
    );
    // The shared part was last used by the newest record (at 1,019): it
    // stays when expiring before 1,019; the own parts of the 19 older go.
    let e = store.expire_calls(1_019).await.unwrap();
    assert_eq!((e.calls, e.parts), (19, 19));
    assert_eq!(
        store
            .call_parts(vec![system.hash.clone()])
            .await
            .unwrap()
            .len(),
        1
    );
    let e = store.expire_calls(1_020).await.unwrap();
    assert_eq!((e.calls, e.parts), (1, 2));
}
