//! `stategraph test [PATH] [--filter TEXT]`: run the cases of test files
//! (`graphs/tests/*.yaml`, or `tests/` beside any graph directory) in
//! parallel, print each failure readably, write JUnit XML and JSON for CI,
//! exit 1 on any failure. `--from-run RUN` writes a case from a stored run
//! instead (see [`super::test_record`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::setup::{Ctx, runtime};
use crate::graph::diagnostic::Diagnostic;
use crate::testing::{self, CaseResult, Env, TestFile};
use crate::units::Dur;

/// The `test` command's arguments.
#[derive(clap::Args, Debug)]
pub(super) struct TestArgs {
    /// A test file, or a directory searched for `tests/*.yaml` (default:
    /// the graph directory's `tests/`).
    pub(super) path: Option<PathBuf>,
    /// Run only the cases whose name, file or graph contains this text.
    #[arg(long)]
    pub(super) filter: Option<String>,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub(super) junit: Option<PathBuf>,
    /// Write a JSON report here (`-` for stdout, instead of the text).
    #[arg(long, value_name = "FILE")]
    pub(super) json: Option<PathBuf>,
    /// Cases run at once (default: twice the CPUs).
    #[arg(long, short)]
    pub(super) jobs: Option<usize>,
    /// List passing cases too.
    #[arg(long, short)]
    pub(super) verbose: bool,
    /// The longest one turn may take, e.g. 30s.
    #[arg(long, default_value = "60s")]
    pub(super) timeout: String,
    /// Ask the configured model (`[llm]`, `--model-script`) for the calls a
    /// case does not answer: no reply left, or a recorded reply whose
    /// request changed since the recording (a prompt edit). Off: those
    /// calls fail the case, and no model is reached.
    #[arg(long)]
    pub(super) live: bool,
    /// Judge the `judge:` expectations with the model of this `[llm]` role
    /// (default: `[testing] judge`). Without one they are reported as not
    /// judged.
    #[arg(long, value_name = "ROLE")]
    pub(super) judge: Option<String>,
    /// Write a case from this stored run instead of running tests.
    #[arg(long, value_name = "RUN_ID")]
    pub(super) from_run: Option<uuid::Uuid>,
    /// The name of the case `--from-run` writes.
    #[arg(long, requires = "from_run")]
    pub(super) name: Option<String>,
    /// The file `--from-run` adds the case to (default:
    /// `GRAPHS/tests/GRAPH_recorded.yaml`).
    #[arg(long, requires = "from_run", value_name = "FILE")]
    pub(super) to: Option<PathBuf>,
}

/// `stategraph test`.
pub(super) fn test(ctx: &Ctx, args: TestArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    if let Some(run) = args.from_run {
        return runtime()?.block_on(super::test_record::from_run(
            ctx, run, args.name, args.to, out,
        ));
    }
    let root = args
        .path
        .clone()
        .unwrap_or_else(|| ctx.config.paths.graphs.clone());
    let files = testing::find_test_files(&root);
    if files.is_empty() {
        bail!(
            "no test files at {} (test files are `tests/*.yaml` beside the graphs; see docs/testing.md)",
            root.display()
        );
    }
    let timeout = Dur::parse(&args.timeout)
        .ok_or_else(|| anyhow::anyhow!("--timeout {}: write e.g. 30s or 2m", args.timeout))?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() * 2));
    let started = Instant::now();
    let live = if args.live {
        Some(ctx.services()?.models)
    } else {
        None
    };
    let judge = match args
        .judge
        .clone()
        .or_else(|| ctx.config.testing.judge.clone())
    {
        Some(role) => Some(
            testing::Judge::of_role(&ctx.services()?.models, &role).map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let (suites, diagnostics) = load(ctx, &files, timeout, live, judge);
    for d in &diagnostics {
        writeln!(out, "{d}")?;
    }
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let real_tools = suites
        .iter()
        .flat_map(|(_, files)| files.iter())
        .flat_map(|f| f.cases.iter())
        .any(|c| !c.real_tools.is_empty());
    let filter = args.filter.as_deref();
    let work = async {
        let mut results = Vec::new();
        for (env, files) in suites {
            results.extend(testing::run_all(env, files, filter, jobs).await);
        }
        results
    };
    let rt = runtime()?;
    let results: Vec<CaseResult> = if real_tools {
        rt.block_on(ctx.with_mcp(work))
    } else {
        rt.block_on(work)
    };
    let elapsed = started.elapsed();
    report(&args, &results, elapsed, out)?;
    if results.is_empty() && errors == 0 {
        bail!(
            "no case matches{}",
            filter
                .map(|f| format!(" --filter {f:?}"))
                .unwrap_or_default()
        );
    }
    if errors > 0 {
        writeln!(
            out,
            "{errors} error(s) in test files: their cases did not run"
        )?;
    }
    let ok = errors == 0 && results.iter().all(CaseResult::passed);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Test files and the graphs they run against.
type Suite = (Arc<Env>, Vec<Arc<TestFile>>);

/// The test files grouped by the graph directory they run against, each
/// group with its compiled graphs; files with errors are left out (their
/// diagnostics returned).
fn load(
    ctx: &Ctx,
    files: &[PathBuf],
    turn_timeout: Duration,
    live: Option<crate::llm::Models>,
    judge: Option<testing::Judge>,
) -> (Vec<Suite>, Vec<Diagnostic>) {
    let mut groups: BTreeMap<PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for f in files {
        groups
            .entry(testing::graphs_dir_of(f, &ctx.config.paths.graphs))
            .or_default()
            .push(f);
    }
    let mut diagnostics = Vec::new();
    let mut suites = Vec::new();
    for (dir, files) in groups {
        let prompts = prompts_for(ctx, &dir);
        let catalog = Arc::new(ctx.registries.load(&dir, &prompts));
        let env = Arc::new(Env {
            catalog: Arc::clone(&catalog),
            tools: Arc::clone(&ctx.registries.tools),
            turn_timeout,
            live: live.clone(),
            judge: judge.clone(),
        });
        let mut ok = Vec::new();
        for f in files {
            match testing::load_test_file(f) {
                Ok(file) => {
                    let found = testing::check_test_file(&file, &catalog, &ctx.registries.tools);
                    let bad = found.iter().any(Diagnostic::is_error);
                    diagnostics.extend(found);
                    if !bad {
                        ok.push(Arc::new(file));
                    }
                }
                Err(d) => diagnostics.extend(d),
            }
        }
        suites.push((env, ok));
    }
    (suites, diagnostics)
}

/// The prompts of a graph directory: the configured ones for the
/// configured graph directory, else those beside it.
pub(super) fn prompts_for(ctx: &Ctx, graphs_dir: &Path) -> PathBuf {
    let paths = &ctx.config.paths;
    if same_dir(graphs_dir, &paths.graphs) {
        paths.prompts.clone()
    } else {
        testing::prompts_dir_of(graphs_dir, &paths.prompts)
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn report(
    args: &TestArgs,
    results: &[CaseResult],
    elapsed: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    if json_to_stdout {
        writeln!(out, "{:#}", testing::json_report(results, elapsed))?;
    } else {
        write!(
            out,
            "{}",
            testing::text_report(results, elapsed, args.verbose)
        )?;
    }
    if let Some(path) = args.json.as_ref().filter(|_| !json_to_stdout) {
        let text = format!("{:#}\n", testing::json_report(results, elapsed));
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, testing::junit(results, elapsed))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
