//! `stategraph eval`: the user inputs of stored chats run again against the
//! graphs of the working directory, with recorded model outputs where a
//! node asks what it asked then and the configured model elsewhere; prints
//! what changed per chat turn and a summary ("37 of 200 chat turns took
//! another route; 5 now fail"), and writes JSON (see `crate::testing::eval`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};

use super::setup::{Ctx, runtime};
use crate::runtime::RunStatus;
use crate::store::{RunQuery, RunRecord, Store};
use crate::testing::{self, EvalEnv, StoredRun};
use crate::units::Dur;

/// The `eval` command's arguments.
#[derive(clap::Args, Debug)]
pub(super) struct EvalArgs {
    /// Only runs of this graph.
    #[arg(long)]
    pub(super) graph: Option<String>,
    /// Only runs started within this long, e.g. 7d, 12h.
    #[arg(long)]
    pub(super) since: Option<String>,
    /// Only the runs of these chats (repeatable).
    #[arg(long = "chat", value_name = "CHAT_ID")]
    pub(super) chats: Vec<String>,
    /// These runs (repeatable).
    #[arg(long = "run", value_name = "RUN_ID")]
    pub(super) runs: Vec<uuid::Uuid>,
    /// Only the runs of chats tagged so (repeatable: any of the tags): the
    /// chat's metadata `tags`, set through the LangGraph API's thread
    /// metadata (docs/testing.md).
    #[arg(long = "tag", value_name = "TAG")]
    pub(super) tags: Vec<String>,
    /// At most this many runs, the newest first.
    #[arg(long, default_value_t = 200)]
    pub(super) limit: usize,
    /// Write the report as JSON here (`-` for stdout, instead of the text).
    #[arg(long, value_name = "FILE")]
    pub(super) json: Option<PathBuf>,
    /// Runs evaluated at once (default: twice the CPUs).
    #[arg(long, short)]
    pub(super) jobs: Option<usize>,
    /// List the runs that did not change too.
    #[arg(long, short)]
    pub(super) verbose: bool,
    /// The longest one run may take, e.g. 2m.
    #[arg(long, default_value = "120s")]
    pub(super) timeout: String,
    /// Exit 1 when any run took another route, now fails or fails a judged
    /// criterion (for CI).
    #[arg(long)]
    pub(super) fail_on_change: bool,
    /// Run the user inputs of this file instead of stored chats (YAML or
    /// JSON: a list of `{name, graph, message | messages, state}`, or
    /// `{graph, inputs: [...]}`), with the configured model.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["since", "chats", "runs", "tags"])]
    pub(super) inputs: Option<PathBuf>,
    /// Judge each run's answer now against this criterion (repeatable), e.g.
    /// "the answer cites a source"; judged only with a judge model.
    #[arg(long = "criterion", value_name = "TEXT")]
    pub(super) criteria: Vec<String>,
    /// The `[llm]` role whose model judges the criteria (default:
    /// `[testing] judge`); without one they are reported as not judged.
    #[arg(long, value_name = "ROLE")]
    pub(super) judge: Option<String>,
    /// Compare the inputs' runs with this earlier `--json` report of the
    /// same inputs (matched by name).
    #[arg(long, value_name = "REPORT", requires = "inputs")]
    pub(super) baseline: Option<PathBuf>,
}

/// `stategraph eval`.
pub(super) fn eval(ctx: &Ctx, args: EvalArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let since = match &args.since {
        None => None,
        Some(s) => {
            let d = Dur::parse(s)
                .ok_or_else(|| anyhow::anyhow!("--since {s}: write an age, e.g. 7d or 12h"))?;
            Some(crate::events::now_micros().saturating_sub(d.as_micros() as u64))
        }
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() * 2));
    let env = eval_env(ctx, &args)?;
    let from_file = match &args.inputs {
        Some(path) => Some(inputs(path, args.baseline.as_deref(), &args, &env)?),
        None => None,
    };
    let rt = runtime()?;
    let (evals, elapsed, kept) = rt.block_on(ctx.with_mcp(async {
        let store = match from_file {
            Some(_) => None,
            None => Some(ctx.store().await?),
        };
        let runs = match (from_file, &store) {
            (Some(runs), _) => runs,
            (None, Some(store)) => select(&**store, &args, since).await?,
            (None, None) => Vec::new(),
        };
        if runs.is_empty() {
            bail!("no stored run matches (give --graph, --since, --chat, --tag or --run; see docs/testing.md)");
        }
        let started = Instant::now();
        let judge = env.judge.clone();
        let evals = testing::eval_all(env, runs, jobs).await;
        let elapsed = started.elapsed();
        // The verdicts go with the stored runs they judge (their run page
        // shows them); inputs from a file have no stored run.
        let kept = match (&store, &judge) {
            (Some(store), Some(j)) => keep_verdicts(&**store, &evals, j).await?,
            _ => 0,
        };
        anyhow::Ok((evals, elapsed, kept))
    }))?;
    write_report(&args, &evals, elapsed, kept, out)?;
    let s = testing::eval_summary(&evals);
    Ok(
        if args.fail_on_change && (s.route > 0 || s.now_fail > 0 || s.judged_fail > 0) {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// The graphs, models, tools and judge runs are evaluated with.
fn eval_env(ctx: &Ctx, args: &EvalArgs) -> anyhow::Result<Arc<EvalEnv>> {
    let timeout = Dur::parse(&args.timeout)
        .ok_or_else(|| anyhow::anyhow!("--timeout {}: write e.g. 30s or 2m", args.timeout))?;
    let services = ctx.services()?;
    let judge = match args
        .judge
        .clone()
        .or_else(|| ctx.config.testing.judge.clone())
    {
        Some(role) => {
            Some(testing::Judge::of_role(&services.models, &role).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    Ok(Arc::new(EvalEnv {
        catalog: ctx.graphs().catalog(),
        models: services.models.clone(),
        tools: Arc::clone(&services.tools),
        timeout,
        judge,
        criteria: args.criteria.clone(),
    }))
}

/// Stores the judge's verdicts on stored runs with those runs; how many.
async fn keep_verdicts(
    store: &dyn Store,
    evals: &[testing::RunEval],
    judge: &testing::Judge,
) -> anyhow::Result<usize> {
    let verdicts = testing::verdict_records(evals, judge, "eval");
    let kept = verdicts.len();
    if kept > 0 {
        store
            .add_verdicts(verdicts)
            .await
            .context("storing the judge's verdicts with their runs")?;
    }
    Ok(kept)
}

/// The report: text or JSON on `out`, and the `--json` file.
fn write_report(
    args: &EvalArgs,
    evals: &[testing::RunEval],
    elapsed: std::time::Duration,
    kept: usize,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let to_stdout = args.json.as_deref() == Some(Path::new("-"));
    let json = || {
        let mut report = testing::eval_json(evals, elapsed);
        report["verdicts_stored"] = kept.into();
        report
    };
    if to_stdout {
        writeln!(out, "{:#}", json())?;
    } else {
        write!(out, "{}", testing::eval_text(evals, elapsed, args.verbose))?;
        if kept > 0 {
            writeln!(
                out,
                "{kept} verdict(s) stored with their runs (the studio's run page; GET /api/runs/ID/verdicts)"
            )?;
        }
    }
    if let Some(path) = args.json.as_ref().filter(|_| !to_stdout) {
        let text = format!("{:#}\n", json());
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The inputs of a file as runs without a recording, each with its side
/// in the baseline report when one is given.
fn inputs(
    path: &Path,
    baseline: Option<&Path>,
    args: &EvalArgs,
    env: &EvalEnv,
) -> anyhow::Result<Vec<StoredRun>> {
    use serde_json::Value;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: Value =
        serde_saphyr::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let (default_graph, items) = match &doc {
        Value::Array(items) => (args.graph.clone(), items.clone()),
        Value::Object(m) => (
            m.get("graph")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| args.graph.clone()),
            m.get("inputs")
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("{}: `inputs` is a list", path.display()))?,
        ),
        _ => bail!(
            "{}: a list of inputs, or {{graph, inputs: [...]}}",
            path.display()
        ),
    };
    let before: Vec<Value> = match baseline {
        None => Vec::new(),
        Some(b) => {
            let text =
                std::fs::read_to_string(b).with_context(|| format!("reading {}", b.display()))?;
            let report: Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not an eval --json report", b.display()))?;
            report["runs"].as_array().cloned().unwrap_or_default()
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{} input {}", path.display(), i + 1);
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("input {}", i + 1), str::to_owned);
        let graph_id = item
            .get("graph")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| default_graph.clone())
            .ok_or_else(|| anyhow::anyhow!("{at}: no `graph` (give it, or --graph)"))?;
        let graph = env
            .catalog
            .get(&graph_id)
            .ok_or_else(|| anyhow::anyhow!("{at}: no valid graph `{graph_id}`"))?;
        let input = crate::testing::eval::input_state(
            graph,
            item.get("message").and_then(Value::as_str),
            item.get("messages"),
            item.get("state"),
        )
        .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        let side = before
            .iter()
            .find(|r| r["chat"] == name.as_str())
            .and_then(|r| serde_json::from_value(r["after"].clone()).ok());
        if baseline.is_some() && side.is_none() {
            eprintln!("note: {name:?} is not in the baseline report; it is only run");
        }
        out.push(StoredRun {
            id: uuid::Uuid::now_v7(),
            chat: Some(name),
            graph: graph_id,
            input,
            events: Vec::new(),
            batches: Vec::new(),
            baseline: side,
        });
    }
    Ok(out)
}

/// The stored runs selected, oldest first, with their events and
/// checkpoints. Runs still going and forks (edits of runs, not user
/// inputs) are left out.
pub(super) async fn select(
    store: &dyn Store,
    args: &EvalArgs,
    since: Option<u64>,
) -> anyhow::Result<Vec<StoredRun>> {
    let mut records: Vec<RunRecord> = Vec::new();
    for id in &args.runs {
        match store.get_run(*id).await? {
            Some(r) => records.push(r),
            None => bail!("no stored run {id}"),
        }
    }
    // Tags are on chats: look among more runs, keep the tagged ones, then
    // the newest `limit` of those.
    let look_at = if args.tags.is_empty() {
        args.limit
    } else {
        TAGGED_AMONG.max(args.limit)
    };
    let query = |chat: Option<String>| RunQuery {
        chat,
        graph: args.graph.clone(),
        since,
        ..RunQuery::newest(look_at)
    };
    if !args.chats.is_empty() {
        for c in &args.chats {
            records.extend(store.list_runs(&query(Some(c.clone()))).await?);
        }
    } else if args.runs.is_empty() {
        records.extend(store.list_runs(&query(None)).await?);
    }
    if !args.tags.is_empty() {
        records = tagged(store, records, &args.tags).await?;
    }
    records.retain(|r| r.status != RunStatus::Running && r.parent.is_none());
    records.sort_by_key(|r| (r.created_at, r.id));
    records.dedup_by_key(|r| r.id);
    records.truncate(args.limit);
    testing::eval::stored_runs(store, records)
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

/// How many of the newest runs `--tag` looks among.
const TAGGED_AMONG: usize = 10_000;

/// The runs whose chat is tagged with any of `tags` (its metadata's `tags`
/// list), each chat's metadata read once per user.
async fn tagged(
    store: &dyn Store,
    records: Vec<RunRecord>,
    tags: &[String],
) -> anyhow::Result<Vec<RunRecord>> {
    let mut users: Vec<&str> = records.iter().map(|r| r.user_id.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    let mut chats = std::collections::HashSet::new();
    for user in users {
        for (chat, metadata) in store.chats_metadata(user).await? {
            let has = metadata["tags"]
                .as_array()
                .is_some_and(|l| l.iter().any(|t| tags.iter().any(|w| t == w.as_str())));
            if has {
                chats.insert(chat);
            }
        }
    }
    Ok(records
        .into_iter()
        .filter(|r| r.chat_id.as_ref().is_some_and(|c| chats.contains(c)))
        .collect())
}
