//! `stategraph test --from-run RUN [--name NAME] [--to FILE]`: a case
//! written from a stored run, added to a test file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;

use super::setup::Ctx;
use crate::testing;

/// Writes the case of `run` into `to` (default
/// `GRAPHS/tests/GRAPH_recorded.yaml`) and says where.
pub(super) async fn from_run(
    ctx: &Ctx,
    run: uuid::Uuid,
    name: Option<String>,
    to: Option<PathBuf>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let store = ctx.store().await?;
    let graphs = ctx.graphs();
    let catalog = graphs.catalog();
    let case = testing::case_from_store(
        &*store,
        &catalog,
        &ctx.registries.tools,
        run,
        name.as_deref(),
    )
    .await
    .map_err(|e| anyhow!(e))?;
    let file =
        to.unwrap_or_else(|| testing::default_case_file(&ctx.config.paths.graphs, &case.graph));
    let name = testing::add_case(&file, &case).map_err(|e| anyhow!(e))?;
    writeln!(out, "wrote case {name:?} to {}", file.display())?;
    writeln!(
        out,
        "next: stategraph test {} --filter {:?}  (then trim what should stay loose)",
        file.display(),
        name
    )?;
    Ok(ExitCode::SUCCESS)
}
