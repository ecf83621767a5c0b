//! The `stategraph` command line, as a library.
//!
//! The binary is [`main`]. An application with its own state types, node
//! kinds, reducers or tools builds the same command line over its
//! registries with [`App`] — `serve`, `check`, `run`, `replay`, `fork` and
//! the rest then know its additions (`examples/custom_kind` is one):
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     let mut registries = stategraph::Registries::default();
//!     // registries.kinds.register(...); registries.tools.register(...);
//!     stategraph::cli::App::new(registries)
//!         .graphs_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/graphs"))
//!         .main()
//! }
//! ```
//!
//! Each command is a function over a `Ctx` (configuration and
//! registries) that writes to a `Write`, so tests call them directly.

mod args;
mod check;
mod doctor;
mod eval;
mod graph;
mod new;
mod replay;
mod run;
mod serve;
mod setup;
mod test;
mod test_record;
mod tools;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, anyhow};
use clap::Parser;

pub use check::{CheckFormat, check};
pub use graph::{GraphFormat, graph};
pub use new::new_graph;
pub use run::RunArgs;

use args::{CheckFormatArg, Cli, Command, GraphFormatArg, SchemaArg, ToolsAction};
use replay::ReplayView;
use setup::{Ctx, field_values, runtime};

use crate::config::{Config, PathsConfig};
use crate::events::ForkMode;
use crate::graph::Bundle;
use crate::nodes::Registries;
use crate::units::Dur;

/// The `stategraph` command line with the built-in registries.
pub fn main() -> ExitCode {
    main_with(Registries::default())
}

/// The `stategraph` command line over `registries` (an application's own
/// state types, kinds, reducers and tools besides the built-in ones).
pub fn main_with(registries: Registries) -> ExitCode {
    App::new(registries).main()
}

/// The command line of an application built on stategraph: its registries
/// and where its files are.
#[derive(Debug)]
pub struct App {
    registries: Registries,
    graphs: Option<PathBuf>,
    prompts: Option<PathBuf>,
    built_in: Option<&'static Bundle>,
}

impl App {
    /// The command line over `registries`.
    pub fn new(registries: Registries) -> Self {
        Self {
            registries,
            graphs: None,
            prompts: None,
            built_in: None,
        }
    }

    /// Graphs and prompts served when the graph directory does not exist
    /// (the `stategraph` binary's shipped copies).
    pub fn built_in(mut self, bundle: &'static Bundle) -> Self {
        self.built_in = Some(bundle);
        self
    }

    /// The graph directory when neither `--graphs`, `STATEGRAPH_GRAPHS` nor
    /// the config file names one (instead of `./graphs`).
    pub fn graphs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.graphs = Some(dir.into());
        self
    }

    /// The prompt directory when nothing else names one (instead of
    /// `./prompts`).
    pub fn prompts_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.prompts = Some(dir.into());
        self
    }

    /// Parses the process's arguments and runs the command.
    pub fn main(self) -> ExitCode {
        self.main_from(std::env::args_os())
    }

    /// Parses `args` (the first is the program name) and runs the command.
    pub fn main_from(
        self,
        args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    ) -> ExitCode {
        let cli = Cli::parse_from(args);
        match self.dispatch(cli) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        }
    }

    /// The configuration: the file and environment, then the application's
    /// directories where those left the built-in ones, then the flags.
    fn config(&self, cli: &Cli) -> anyhow::Result<Config> {
        let mut config = Config::load(cli.config.as_deref())?;
        let builtin = PathsConfig::default();
        if let Some(g) = self
            .graphs
            .clone()
            .filter(|_| config.paths.graphs == builtin.graphs)
        {
            config.paths.graphs = g;
        }
        if let Some(p) = self
            .prompts
            .clone()
            .filter(|_| config.paths.prompts == builtin.prompts)
        {
            config.paths.prompts = p;
        }
        if let Some(g) = &cli.graphs {
            config.paths.graphs = g.clone();
        }
        if let Some(p) = &cli.prompts {
            config.paths.prompts = p.clone();
        }
        if let Some(s) = &cli.model_script {
            config.llm.script = Some(s.clone());
        }
        config.paths.built_in = self.built_in;
        Ok(config)
    }

    fn dispatch(self, cli: Cli) -> anyhow::Result<ExitCode> {
        let config = self.config(&cli)?;
        dispatch(cli, config, self.registries)
    }
}

fn dispatch(cli: Cli, config: Config, registries: Registries) -> anyhow::Result<ExitCode> {
    if let Command::Serve { bind } = cli.command {
        return serve::serve(config, registries, bind);
    }
    let ctx = Ctx::new(config, registries)?;
    let out = &mut std::io::stdout();
    match cli.command {
        Command::Serve { .. } => unreachable!("handled above"),
        Command::Check { paths, format } => check_command(&ctx, paths, format, out),
        Command::Graph { name, format } => {
            let g = ctx.graph(&ctx.graphs(), &name)?;
            let format = match format {
                GraphFormatArg::Mermaid => GraphFormat::Mermaid,
                GraphFormatArg::Dot => GraphFormat::Dot,
            };
            write!(out, "{}", graph(&g, format))?;
            Ok(ExitCode::SUCCESS)
        }
        c @ (Command::Run { .. }
        | Command::Replay { .. }
        | Command::Fork { .. }
        | Command::Resume { .. }) => runs_command(&ctx, c, out),
        Command::Doctor => {
            let models = ctx
                .config
                .llm
                .build_models()
                .context("model configuration")?;
            let ok = runtime()?.block_on(doctor::doctor(&models, out))?;
            Ok(exit(ok))
        }
        Command::Migrate => runtime()?.block_on(migrate(&ctx, out)),
        Command::Tools {
            action: ToolsAction::Lock { timeout },
        } => runtime()?.block_on(tools::lock(&ctx, timeout, out)),
        Command::Prune { older_than, chats } => {
            runtime()?.block_on(prune(&ctx, &older_than, chats, out))
        }
        Command::Schema { format } => {
            let schema = match format {
                SchemaArg::Graph => {
                    crate::graph::file_schema::graph_file_schema(&ctx.registries.kinds)
                }
                SchemaArg::Test => crate::testing::test_file_schema(),
            };
            writeln!(out, "{schema:#}")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Test(args) => test::test(&ctx, args, out),
        Command::Eval(args) => eval::eval(&ctx, args, out),
        Command::New { name, force } => {
            let paths = &ctx.config.paths;
            for p in new_graph(&name, &paths.graphs, &paths.prompts, force)? {
                writeln!(out, "wrote {}", p.display())?;
            }
            writeln!(
                out,
                "next: stategraph check && stategraph run {name} \"hello\""
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The commands over runs: run, replay, fork, resume.
fn runs_command(
    ctx: &Ctx,
    command: Command,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<ExitCode> {
    let ok = match command {
        Command::Run {
            graph,
            message,
            set,
            json,
            no_store,
            break_before,
            break_after,
        } => {
            let args = RunArgs {
                graph,
                message,
                set: field_values(&set)?,
                json,
                store: !no_store,
                breakpoints: crate::events::Breakpoints {
                    before: break_before,
                    after: break_after,
                },
            };
            runtime()?.block_on(ctx.with_mcp(run::run(ctx, args, out)))?
        }
        Command::Replay {
            run,
            sse,
            json,
            reexecute,
            calls,
        } => {
            let view = replay_view(sse, json, reexecute, calls);
            runtime()?.block_on(ctx.with_mcp(replay::replay_run(ctx, run, view, out)))?
        }
        Command::Fork {
            run,
            at,
            after,
            before,
            set,
            attach,
        } => {
            let (mode, node) = match before {
                Some(n) => (ForkMode::Before, Some(n)),
                None => (ForkMode::After, after),
            };
            let fork = replay::Fork {
                run,
                at,
                mode,
                node,
                set,
                attach,
            };
            runtime()?.block_on(ctx.with_mcp(replay::fork_run(ctx, fork, out)))?
        }
        Command::Resume {
            run,
            value,
            answer,
            set,
            step,
            abort,
            break_before,
            break_after,
        } => {
            let at_break = replay::AtBreakpoint {
                set: field_values(&set)?,
                step,
                abort,
                breakpoints: new_breakpoints(break_before, break_after),
            };
            let answers = (value, answer);
            runtime()?
                .block_on(ctx.with_mcp(replay::resume_run(ctx, run, answers, at_break, out)))?
        }
        _ => unreachable!("only the commands over runs come here"),
    };
    Ok(exit(ok))
}

/// What `replay` prints: the first of `--sse`, `--json`, `--reexecute`
/// given wins, then `--calls`; the timeline by default.
fn replay_view(sse: bool, json: bool, reexecute: bool, calls: bool) -> ReplayView {
    match (sse, json, reexecute) {
        (true, ..) => ReplayView::Sse,
        (_, true, _) => ReplayView::Json,
        (.., true) => ReplayView::Reexecute,
        _ if calls => ReplayView::Calls,
        _ => ReplayView::Timeline,
    }
}

/// The breakpoints `resume --break-before/--break-after` sets for the rest
/// of the run (`None`: none given, the run keeps those it had).
fn new_breakpoints(before: Vec<String>, after: Vec<String>) -> Option<crate::events::Breakpoints> {
    (!before.is_empty() || !after.is_empty())
        .then_some(crate::events::Breakpoints { before, after })
}

fn check_command(
    ctx: &Ctx,
    paths: Vec<std::path::PathBuf>,
    format: CheckFormatArg,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let paths = if paths.is_empty() {
        vec![ctx.config.paths.graphs.clone()]
    } else {
        paths
    };
    let format = match format {
        CheckFormatArg::Text => CheckFormat::Text,
        CheckFormatArg::Json => CheckFormat::Json,
        CheckFormatArg::Github => CheckFormat::Github,
    };
    Ok(exit(check(
        &paths,
        &ctx.config.paths.prompts,
        &ctx.registries,
        format,
        out,
    )?))
}

/// `stategraph migrate`.
async fn migrate(ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let report = crate::store::config::migrate(&ctx.config.store).await?;
    writeln!(
        out,
        "schema version {} → {} (applied {:?})",
        report.from, report.to, report.applied
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `stategraph prune`.
async fn prune(
    ctx: &Ctx,
    older_than: &str,
    chats: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let age = Dur::parse(older_than)
        .ok_or_else(|| anyhow!("--older-than {older_than}: write e.g. 30d or 12h"))?;
    let before = crate::events::now_micros().saturating_sub(age.as_micros() as u64);
    let report = ctx.store().await?.prune(before, chats).await?;
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    Ok(ExitCode::SUCCESS)
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
