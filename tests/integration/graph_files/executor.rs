//! Executor behaviour on small graphs with Rust test nodes: parallel merge
//! determinism, joins, map fan-out, cycles and the recursion limit, retries,
//! timeouts, cancellation, checkpoints, resume and subgraphs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use proptest::prelude::*;
use serde_json::{Value, json};
use stategraph::internals::events::{CustomData, Event, EventKind};
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::Models;
use stategraph::internals::llm::offline::OfflineModel;
use stategraph::internals::nodes::Registries;
use stategraph::internals::nodes::{Node, NodeContext, NodeError};
use stategraph::internals::runtime::{
    self, CheckpointError, Checkpointer, MemoryCheckpointer, Resume, RunError, RunOptions,
    RunStatus, Services, StepBatch,
};
use stategraph::state::{DynState, Patch, State};
use tokio::sync::mpsc;

stategraph::state! {
    /// State for executor tests.
    pub struct TestState as "test" {
        /// Appended labels.
        log: Vec<String> => append,
        /// A counter.
        n: i64 => last,
        /// Loop exit flag.
        done: bool => last,
        /// Items for map fan-out.
        items: Vec<String> => last,
        /// Free text.
        note: String => last,
    }
}

/// Appends its label to `log` after a delay (random up to `max_delay_ms`,
/// or the map item's length in ms when `item_delay` is set).
#[derive(Debug)]
struct Push {
    label: String,
    max_delay_ms: u64,
}

impl Node for Push {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async move {
            if self.max_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=self.max_delay_ms)))
                    .await;
            }
            let label = match cx.item {
                Some(item) => format!("{}:{}", self.label, item.as_str().unwrap_or_default()),
                None => self.label.clone(),
            };
            Ok(Patch::new().set("log", json!([label])))
        })
    }
}

/// n += 1; done = n >= target.
#[derive(Debug)]
struct Count {
    target: i64,
}

impl Node for Count {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async move {
            let schema = cx.state.schema();
            let n = cx
                .state
                .get(schema.field("n").unwrap())
                .as_i64()
                .unwrap_or(0)
                + 1;
            Ok(Patch::new().set("n", n).set("done", n >= self.target))
        })
    }
}

/// Fails with a transient error `fails` times, then writes `note`.
#[derive(Debug)]
struct Flaky {
    fails: AtomicU32,
}

impl Node for Flaky {
    fn run<'a>(&'a self, _cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async move {
            if self.fails.load(Ordering::SeqCst) > 0 {
                self.fails.fetch_sub(1, Ordering::SeqCst);
                return Err(NodeError::Llm(
                    stategraph::internals::llm::LlmError::Connect("flaky".into()),
                ));
            }
            Ok(Patch::new().set("note", "recovered"))
        })
    }
}

/// Sleeps for `ms`, then writes `note`.
#[derive(Debug)]
struct Sleep {
    ms: u64,
}

impl Node for Sleep {
    fn run<'a>(&'a self, _cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
            Ok(Patch::new().set("note", "slept"))
        })
    }
}

/// Writes a field the state does not have.
#[derive(Debug)]
struct Bogus;

impl Node for Bogus {
    fn run<'a>(&'a self, _cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async { Ok(Patch::new().set("bogus", 1)) })
    }
}

fn param_u64(p: &Value, key: &str) -> u64 {
    p[key].as_u64().unwrap_or(0)
}

fn registries(flaky_fails: u32) -> Registries {
    let mut reg = crate::support::registries();
    reg.states.register::<TestState>();
    let fails = Arc::new(AtomicU32::new(flaky_fails));
    reg.kinds
        .register_fn("push", |p| {
            Ok(Arc::new(Push {
                label: p["label"].as_str().unwrap_or("?").into(),
                max_delay_ms: param_u64(p, "max_delay_ms"),
            }))
        })
        .register_fn("count", |p| {
            Ok(Arc::new(Count {
                target: p["target"].as_i64().unwrap_or(3),
            }))
        })
        .register_fn("flaky", move |_| {
            Ok(Arc::new(Flaky {
                fails: AtomicU32::new(fails.load(Ordering::SeqCst)),
            }))
        })
        .register_fn("sleep", |p| {
            Ok(Arc::new(Sleep {
                ms: param_u64(p, "ms"),
            }))
        })
        .register_fn("bogus", |_| Ok(Arc::new(Bogus)));
    reg
}

/// One `flaky` node with the given retry policy.
fn flaky_graph(
    attempts: u32,
    backoff: &str,
    reg: &Registries,
) -> Arc<stategraph::internals::nodes::Graph> {
    compile(
        &format!(
            "state: test\nentry: flaky\nnodes:\n  - {{id: flaky, kind: flaky, writes: [note], \
             retry: {{attempts: {attempts}, backoff: {backoff}}}}}\nedges: [flaky -> END]\n"
        ),
        reg,
    )
}

fn compile(yaml: &str, reg: &Registries) -> Arc<stategraph::internals::nodes::Graph> {
    compile_many(&[("g", yaml)], reg, "g")
}

fn compile_many(
    graphs: &[(&str, &str)],
    reg: &Registries,
    main: &str,
) -> Arc<stategraph::internals::nodes::Graph> {
    let cat = reg.from_sources(
        graphs,
        Prompts::from_sources(std::path::Path::new("prompts"), []),
    );
    assert!(
        !cat.has_errors(),
        "{}",
        cat.diagnostics
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    Arc::clone(cat.get(main).unwrap())
}

fn services(reg: &Registries) -> Arc<Services> {
    Arc::new(Services::new(
        Models::single(Arc::new(OfflineModel::default())),
        Arc::clone(&reg.tools),
    ))
}

/// Runs to the end, collecting every event.
async fn run_collect(
    graph: Arc<stategraph::internals::nodes::Graph>,
    services: Arc<Services>,
    input: Value,
    mut opts: RunOptions,
) -> (Result<runtime::RunOutcome, RunError>, Vec<Arc<Event>>) {
    let (tx, mut rx) = mpsc::channel(64);
    opts.events = Some(tx);
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(e) = rx.recv().await {
            all.push(e);
        }
        all
    });
    let result = runtime::run(graph, services, input, opts).await;
    (result, collector.await.unwrap())
}

fn log_of(state: &dyn DynState) -> Vec<String> {
    serde_json::from_value(state.get(state.schema().field("log").unwrap())).unwrap()
}

const FAN_OUT: &str = r#"
state: test
entry: start
nodes:
  - {id: start, kind: noop}
  - {id: a, kind: push, writes: [log], params: {label: a, max_delay_ms: 15}}
  - {id: b, kind: push, writes: [log], params: {label: b, max_delay_ms: 15}}
  - {id: c, kind: push, writes: [log], params: {label: c, max_delay_ms: 15}}
  - {id: joined, kind: push, writes: [log], params: {label: joined}}
edges:
  - from: start
    to: [c, a, b]
  - from: [a, b, c]
    to: joined
  - joined -> END
"#;

#[tokio::test]
async fn fan_out_merges_in_task_order_and_join_waits_for_all_branches() {
    let reg = registries(0);
    let g = compile(FAN_OUT, &reg);
    for _ in 0..15 {
        let (r, events) = run_collect(
            Arc::clone(&g),
            services(&reg),
            json!({}),
            RunOptions::default(),
        )
        .await;
        let out = r.unwrap();
        // Declaration order a, b, c regardless of random completion order.
        assert_eq!(log_of(&*out.state), ["a", "b", "c", "joined"]);
        assert_eq!(out.steps, 3);
        let joined_starts = events
            .iter()
            .filter(|e| {
                e.node.as_deref() == Some("joined")
                    && matches!(e.event, EventKind::NodeStarted { .. })
            })
            .count();
        assert_eq!(
            joined_starts, 1,
            "the join fires once, after all three branches"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Parallel branches finishing in any order give the same state.
    #[test]
    fn parallel_completion_order_never_changes_the_state(delays in proptest::collection::vec(0u64..20, 3)) {
        let yaml = format!(r#"
state: test
entry: [x, y, z]
nodes:
  - {{id: x, kind: sleep, writes: [note], params: {{ms: {}}}}}
  - {{id: y, kind: push, writes: [log], params: {{label: y, max_delay_ms: {}}}}}
  - {{id: z, kind: push, writes: [log], params: {{label: z, max_delay_ms: {}}}}}
edges:
  - x -> END
  - y -> END
  - z -> END
"#, delays[0], delays[1], delays[2]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let reg = registries(0);
        let g = compile(&yaml, &reg);
        let out = rt.block_on(runtime::run(g, services(&reg), json!({}), RunOptions::default())).unwrap();
        prop_assert_eq!(log_of(&*out.state), vec!["y".to_owned(), "z".to_owned()]);
        prop_assert_eq!(out.state.get(out.state.schema().field("note").unwrap()), json!("slept"));
    }
}

#[tokio::test]
async fn two_branches_writing_one_last_value_field_fail_naming_both() {
    let reg = registries(0);
    let g = compile(
        r#"
state: test
entry: [left, right]
nodes:
  - {id: left, kind: set, set: {note: L}}
  - {id: right, kind: set, set: {note: R}}
edges: [left -> END, right -> END]
"#,
        &reg,
    );
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    let err = r.unwrap_err();
    assert_eq!(err.code(), "write_conflict");
    let msg = err.to_string();
    assert!(
        msg.contains("`left`") && msg.contains("`right`") && msg.contains("note"),
        "{msg}"
    );
    assert!(
        matches!(&events.last().unwrap().event, EventKind::RunFailed { error } if error.code == "write_conflict")
    );
}

#[tokio::test]
async fn map_fan_out_runs_one_task_per_item_in_item_order() {
    let reg = registries(0);
    let g = compile(
        r#"
state: test
entry: plan
nodes:
  - {id: plan, kind: set, set: {items: [q1, q2, q3, q4]}}
  - {id: search, kind: push, writes: [log], params: {label: s, max_delay_ms: 10}}
  - {id: merge, kind: push, writes: [log], params: {label: merged}}
edges:
  - from: plan
    map: {over: items, to: search}
  - search -> merge
  - merge -> END
"#,
        &reg,
    );
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    let out = r.unwrap();
    assert_eq!(
        log_of(&*out.state),
        ["s:q1", "s:q2", "s:q3", "s:q4", "merged"]
    );
    let items: Vec<Value> = events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::NodeStarted { item: Some(i), .. } => Some(i.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(items.len(), 4);
    let tasks: Vec<u32> = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::NodeStarted { item: Some(_), .. }))
        .map(|e| e.task)
        .collect();
    let mut sorted = tasks.clone();
    sorted.sort();
    assert_eq!(sorted, [0, 1, 2, 3], "each map task has its own task index");
}

const LOOP: &str = r#"
state: test
entry: count
recursion_limit: RL
nodes:
  - {id: count, kind: count, writes: [n, done], params: {target: TARGET}}
  - {id: check, kind: push, writes: [log], params: {label: check}}
edges:
  - count -> check
  - from: check
    route:
      on: done
      cases: {true: END, false: count}
"#;

#[tokio::test]
async fn cycles_run_until_their_conditional_exit() {
    let reg = registries(0);
    let g = compile(&LOOP.replace("RL", "25").replace("TARGET", "3"), &reg);
    let out = runtime::run(g, services(&reg), json!({}), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(
        out.state.get(out.state.schema().field("n").unwrap()),
        json!(3)
    );
    assert_eq!(out.steps, 6);
}

#[tokio::test]
async fn recursion_limit_names_the_path_that_looped() {
    let reg = registries(0);
    let g = compile(&LOOP.replace("RL", "9").replace("TARGET", "1000"), &reg);
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    let err = r.unwrap_err();
    assert_eq!(err.code(), "recursion_limit");
    let msg = err.to_string();
    assert!(msg.contains("limit of 9 steps"), "{msg}");
    assert!(
        msg.contains("count → check → count") || msg.contains("check → count → check"),
        "{msg}"
    );
    let steps = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
        .count();
    assert_eq!(steps, 9);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_with_backoff() {
    let reg = registries(2);
    let g = flaky_graph(3, "100ms", &reg);
    let started = tokio::time::Instant::now();
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    let out = r.unwrap();
    assert_eq!(
        out.state.get(out.state.schema().field("note").unwrap()),
        json!("recovered")
    );
    let retries: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::NodeRetrying { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 2);
    assert!(
        (80..=120).contains(&retries[0]) && (160..=240).contains(&retries[1]),
        "{retries:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(240));
}

#[tokio::test(start_paused = true)]
async fn retries_are_bounded_and_the_last_error_fails_the_run() {
    let reg = registries(5);
    let g = flaky_graph(2, "10ms", &reg);
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    assert_eq!(r.unwrap_err().code(), "node_failed");
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, EventKind::NodeFailed { attempts: 2, .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_exceeding_its_timeout_fails() {
    let reg = registries(0);
    let g = compile(
        r#"
state: test
entry: slow
nodes:
  - {id: slow, kind: sleep, writes: [note], timeout: 50ms, params: {ms: 10000}}
edges: [slow -> END]
"#,
        &reg,
    );
    let started = tokio::time::Instant::now();
    let err = runtime::run(g, services(&reg), json!({}), RunOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn cancellation_stops_in_flight_nodes_promptly() {
    let reg = registries(0);
    let g = compile(
        r#"
state: test
entry: [slow, slower]
nodes:
  - {id: slow, kind: sleep, writes: [note], params: {ms: 30000}}
  - {id: slower, kind: push, writes: [log], params: {label: x, max_delay_ms: 0}}
edges: [slow -> END, slower -> END]
"#,
        &reg,
    );
    let opts = RunOptions::default();
    let cancel = opts.cancel.clone();
    let started = std::time::Instant::now();
    let run = tokio::spawn(run_collect(g, services(&reg), json!({}), opts));
    tokio::time::sleep(Duration::from_millis(30)).await;
    cancel.cancel();
    let (r, events) = run.await.unwrap();
    assert!(matches!(r, Err(RunError::Cancelled)));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(
        events.last().unwrap().event,
        EventKind::RunCancelled { .. }
    ));
}

#[tokio::test]
async fn unknown_fields_in_a_patch_fail_the_run() {
    let reg = registries(0);
    let g = compile(
        "state: test\nentry: b\nnodes:\n  - {id: b, kind: bogus}\nedges: [b -> END]\n",
        &reg,
    );
    let err = runtime::run(g, services(&reg), json!({}), RunOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_patch");
    assert!(err.to_string().contains("unknown field `bogus`"), "{err}");
}

#[tokio::test]
async fn invalid_input_is_rejected_before_any_step() {
    let reg = registries(0);
    let g = compile(FAN_OUT, &reg);
    let (r, events) = run_collect(
        g,
        services(&reg),
        json!({"n": "not a number"}),
        RunOptions::default(),
    )
    .await;
    assert_eq!(r.unwrap_err().code(), "invalid_input");
    assert_eq!(events.len(), 1);
}

#[tokio::test]
async fn events_are_gapless_stamped_and_paired() {
    let reg = registries(0);
    let g = compile(FAN_OUT, &reg);
    let opts = RunOptions::default();
    let run_id = opts.run_id;
    let (_, events) = run_collect(g, services(&reg), json!({}), opts).await;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(events.iter().all(|e| e.run_id == run_id && e.at > 0));
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(matches!(events[0].event, EventKind::RunStarted(_)));
    assert!(matches!(
        events.last().unwrap().event,
        EventKind::RunFinished { steps: 3, .. }
    ));
    let started = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
        .count();
    let finished = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::NodeFinished { .. }))
        .count();
    assert_eq!((started, finished), (5, 5));
    // Every event round-trips through its persisted JSON form.
    for e in &events {
        let back: Event = serde_json::from_str(&serde_json::to_string(&**e).unwrap()).unwrap();
        assert_eq!(&back, &**e);
    }
}

#[tokio::test]
async fn checkpoints_hold_patches_and_rebuild_every_step_then_resume() {
    let reg = registries(0);
    let g = compile(&LOOP.replace("RL", "25").replace("TARGET", "3"), &reg);
    let store = Arc::new(MemoryCheckpointer::new());
    let opts = RunOptions {
        checkpointer: Some(store.clone()),
        snapshot_every: 4,
        ..Default::default()
    };
    let run_id = opts.run_id;
    let (r, events) = run_collect(Arc::clone(&g), services(&reg), json!({}), opts).await;
    let out = r.unwrap();
    let batches = store.batches(run_id);
    // Step 0 (input) + 5 steps + step 6, which led to END, in the final batch.
    assert_eq!(
        batches.iter().map(|b| b.step).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5, 6]
    );
    let snapshots: Vec<u32> = batches
        .iter()
        .filter(|b| b.snapshot.is_some())
        .map(|b| b.step)
        .collect();
    assert_eq!(snapshots[0], 0, "the input is always a snapshot");
    assert!(
        snapshots.iter().all(|s| [0, 4, 6].contains(s)),
        "snapshots only on the cadence or in the final batch: {snapshots:?}"
    );
    let last = batches.last().unwrap();
    assert_eq!(last.status, RunStatus::Finished);
    assert!(
        !last.writes.is_empty(),
        "the last step's writes travel with it"
    );
    // Every event is in exactly one batch, in order.
    let stored: Vec<u64> = batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.seq))
        .collect();
    assert_eq!(stored, events.iter().map(|e| e.seq).collect::<Vec<_>>());
    // State at step 3 = snapshot 0 + patches 1..=3: count ran twice, check once.
    let at3 = store.state_at(run_id, &g.state, 3).unwrap();
    assert_eq!(at3.get(at3.schema().field("n").unwrap()), json!(2));
    assert_eq!(log_of(&*at3), ["check"]);
    let at6 = store.state_at(run_id, &g.state, 6).unwrap();
    assert_eq!(at6.to_json(), out.state.to_json());
    // Resume from step 3's frontier: the rest of the run gives the same final state.
    let b3 = batches.iter().find(|b| b.step == 3).unwrap();
    let resume = Resume {
        state: at3,
        step: 3,
        next: b3.next.clone(),
        joins: b3.joins.clone(),
        last_seq: 100,
    };
    let resumed = runtime::resume(g, services(&reg), resume, RunOptions::default())
        .await
        .unwrap();
    assert_eq!(resumed.state.to_json(), out.state.to_json());
    assert_eq!(resumed.steps, 6);
}

/// Counts the checkpointer calls (each is one store write) and keeps what
/// they carry.
#[derive(Default)]
struct Calls {
    calls: std::sync::Mutex<Vec<Vec<u32>>>,
    inner: MemoryCheckpointer,
}

impl Checkpointer for Calls {
    fn save(&self, batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>> {
        self.save_steps(vec![batch])
    }

    fn save_steps(&self, batches: Vec<StepBatch>) -> BoxFuture<'_, Result<(), CheckpointError>> {
        self.calls
            .lock()
            .unwrap()
            .push(batches.iter().map(|b| b.step).collect());
        Box::pin(async move {
            for b in batches {
                self.inner.save(b).await?;
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_run_costs_one_checkpointer_call_per_superstep() {
    let reg = registries(0);
    let g = compile(&LOOP.replace("RL", "25").replace("TARGET", "3"), &reg);
    let calls = Arc::new(Calls::default());
    let opts = RunOptions {
        checkpointer: Some(calls.clone()),
        ..Default::default()
    };
    let (r, _) = run_collect(Arc::clone(&g), services(&reg), json!({}), opts).await;
    assert_eq!(r.unwrap().steps, 6);
    // The input (step 0) rides with step 1; step 6 is the final batch.
    assert_eq!(
        *calls.calls.lock().unwrap(),
        [vec![0, 1], vec![2], vec![3], vec![4], vec![5], vec![6]]
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_failing_in_its_first_step_stores_input_and_end_in_one_call() {
    let reg = registries(5);
    let g = flaky_graph(2, "10ms", &reg);
    let calls = Arc::new(Calls::default());
    let opts = RunOptions {
        checkpointer: Some(calls.clone()),
        ..Default::default()
    };
    let run_id = opts.run_id;
    let (r, events) = run_collect(g, services(&reg), json!({}), opts).await;
    assert_eq!(r.unwrap_err().code(), "node_failed");
    assert_eq!(*calls.calls.lock().unwrap(), [vec![0, 1]]);
    let batches = calls.inner.batches(run_id);
    assert_eq!(batches[1].status, RunStatus::Failed);
    let stored: Vec<u64> = batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.seq))
        .collect();
    assert_eq!(stored, events.iter().map(|e| e.seq).collect::<Vec<_>>());
}

#[tokio::test]
async fn subgraphs_run_with_their_own_state_and_prefixed_events() {
    let reg = registries(0);
    let child = r#"
state: test
entry: inner
nodes:
  - {id: inner, kind: push, writes: [log], params: {label: inner}}
  - {id: inner2, kind: set, set: {note: from-child}}
edges: [inner -> inner2, inner2 -> END]
"#;
    let parent = r#"
state: test
entry: before
nodes:
  - {id: before, kind: push, writes: [log], params: {label: before}}
  - id: sub
    kind: subgraph
    graph: child
    inputs: {log: log}
    outputs: {note: note}
edges: [before -> sub, sub -> END]
"#;
    let g = compile_many(&[("child", child), ("parent", parent)], &reg, "parent");
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    let out = r.unwrap();
    assert_eq!(
        out.state.get(out.state.schema().field("note").unwrap()),
        json!("from-child")
    );
    assert_eq!(
        log_of(&*out.state),
        ["before"],
        "only `outputs` flow back to the parent"
    );
    let nodes: Vec<&str> = events
        .iter()
        .filter(|e| matches!(e.event, EventKind::NodeStarted { .. }))
        .filter_map(|e| e.node.as_deref())
        .collect();
    assert_eq!(nodes, ["before", "sub", "sub/inner", "sub/inner2"]);
}

#[test]
fn the_test_state_schema_is_generated() {
    let s = &**TestState::static_schema();
    assert_eq!(
        s.names().collect::<Vec<_>>(),
        ["log", "n", "done", "items", "note"]
    );
}

/// A state that grows by ~1 KB a step: snapshots thin out geometrically
/// instead of repeating the whole history every few steps.
#[tokio::test]
async fn snapshots_of_a_growing_state_follow_the_patches_weight() {
    let reg = registries(0);
    let label = "x".repeat(1000);
    let yaml = LOOP
        .replace("RL", "200")
        .replace("TARGET", "60")
        .replace("label: check", &format!("label: {label}"));
    let g = compile(&yaml, &reg);
    let store = Arc::new(MemoryCheckpointer::new());
    let opts = RunOptions {
        checkpointer: Some(store.clone()),
        snapshot_every: 4,
        ..Default::default()
    };
    let run_id = opts.run_id;
    let (r, _) = run_collect(Arc::clone(&g), services(&reg), json!({}), opts).await;
    let out = r.unwrap();
    assert_eq!(out.steps, 120);
    let batches = store.batches(run_id);
    let bytes = |v: &serde_json::Value| serde_json::to_string(v).unwrap().len();
    let snapshots: Vec<(u32, usize)> = batches
        .iter()
        .filter_map(|b| Some((b.step, bytes(b.snapshot.as_ref()?))))
        .collect();
    let patch_bytes: usize = batches
        .iter()
        .flat_map(|b| &b.writes)
        .map(|w| serde_json::to_string(&w.patch).unwrap().len())
        .sum();
    let snapshot_bytes: usize = snapshots.iter().map(|s| s.1).sum();
    // Every 4 steps would be 30 snapshots and ~15x the patches' bytes.
    assert!(
        snapshots.len() <= 6,
        "snapshots at {:?}",
        snapshots.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    // Geometric snapshots sum to at most ~1.5x the last one, itself at most
    // the final state, which the patches add up to.
    assert!(
        snapshot_bytes * 2 <= patch_bytes * 3,
        "{snapshot_bytes} B of snapshots for {patch_bytes} B of patches: {snapshots:?}"
    );
    // Each snapshot is about three times the previous one (the patches
    // since it weighed twice as much, by an estimate within a few percent of
    // the JSON text) — and every step still rebuilds.
    for pair in snapshots.windows(2).skip(1) {
        assert!(pair[1].1 * 10 >= pair[0].1 * 28, "{pair:?}");
    }
    for step in [0, 1, 7, 33, 64, 119, 120] {
        let state = store.state_at(run_id, &g.state, step).unwrap();
        assert_eq!(
            log_of(&*state).len(),
            step as usize / 2,
            "the log after step {step}"
        );
    }
    let last = store.state_at(run_id, &g.state, 120).unwrap();
    assert_eq!(last.to_json(), out.state.to_json());
}

#[tokio::test]
async fn async_durability_stores_every_step_at_most_one_behind() {
    let reg = registries(0);
    let g = compile(&LOOP.replace("RL", "25").replace("TARGET", "3"), &reg);
    let store = Arc::new(MemoryCheckpointer::new());
    let opts = RunOptions {
        checkpointer: Some(store.clone()),
        durability: stategraph::internals::runtime::Durability::Async,
        ..Default::default()
    };
    let run_id = opts.run_id;
    let (r, events) = run_collect(g, services(&reg), json!({}), opts).await;
    r.unwrap();
    let batches = store.batches(run_id);
    assert_eq!(
        batches.iter().map(|b| b.step).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5, 6]
    );
    let stored: Vec<u64> = batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.seq))
        .collect();
    assert_eq!(
        stored,
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        "no event lost or duplicated"
    );
    let saved: Vec<u32> = events
        .iter()
        .filter_map(|e| match e.event {
            EventKind::CheckpointSaved { checkpoint } => Some(checkpoint),
            _ => None,
        })
        .collect();
    assert_eq!(
        saved,
        [1, 2, 3, 4, 5],
        "each step is confirmed once it has landed (the last lands with run_finished)"
    );
}

/// `set.emit_id` keys an emitted part: the node that runs again in a loop
/// sends the same id each round (so the UI updates one part), an entry
/// without `emit_id` gets none (a part per task), and an id naming no
/// `emit` entry is a load diagnostic.
#[tokio::test]
async fn emit_id_keys_the_part_a_looping_set_node_updates() {
    const GRAPH: &str = r#"
state:
  fields:
    n: { type: integer, default: 0 }
entry: count
nodes:
  - id: count
    kind: set
    set: { n: "{{ n + 1 }}" }
    emit:
      progress: { round: "{{ n }}" }
      tick: "{{ n }}"
    emit_id:
      progress: "progress"
edges:
  - from: count
    route:
      expr: n < 3
      cases: { true: count, false: END }
"#;
    let reg = registries(0);
    let g = compile(GRAPH, &reg);
    let (r, events) = run_collect(g, services(&reg), json!({}), RunOptions::default()).await;
    r.unwrap();
    let custom: Vec<(String, Option<String>, Value)> = events
        .iter()
        .filter_map(|e| match &e.event {
            EventKind::Custom(custom_data) => {
                let CustomData { name, id, data, .. } = &**custom_data;
                Some((name.clone(), id.clone(), data.clone()))
            }
            _ => None,
        })
        .collect();
    let progress: Vec<_> = custom.iter().filter(|c| c.0 == "progress").collect();
    assert_eq!(progress.len(), 3, "{custom:?}");
    for (i, (_, id, data)) in progress.iter().enumerate() {
        assert_eq!(id.as_deref(), Some("progress"));
        assert_eq!(
            *data,
            json!({ "round": i + 1 }),
            "emit sees what the node sets"
        );
    }
    assert!(
        custom
            .iter()
            .filter(|c| c.0 == "tick")
            .all(|c| c.1.is_none()),
        "{custom:?}"
    );

    let bad = GRAPH.replace("progress: \"progress\"", "progres: \"progress\"");
    let cat = reg.from_sources(
        &[("g", bad.as_str())],
        Prompts::from_sources(std::path::Path::new("prompts"), []),
    );
    let d = cat
        .diagnostics
        .iter()
        .find(|d| d.code == "unknown-emit")
        .unwrap_or_else(|| panic!("{:?}", cat.diagnostics));
    assert!(d.to_string().contains("`emit_id.progres`"), "{d}");
    assert!(d.to_string().contains("progress, tick"), "{d}");
}
