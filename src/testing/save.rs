//! Writing a case from a stored run into a test file — what `--from-run`
//! and the studio's "save as test" share: the run read from the store,
//! the case written with [`super::record`], added to the file (created
//! with its header when new), and the file read back to be sure it still
//! parses with one case more.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::parse::parse_test_file;
use super::record::{Recorded, case_yaml, file_header};
use crate::nodes::GraphCatalog;
use crate::store::Store;
use crate::tools::ToolRegistry;

/// A case written from a run.
#[derive(Debug, Clone)]
pub(crate) struct SavedCase {
    /// The run's graph.
    pub graph: String,
    /// The case's name.
    pub name: String,
    /// The case as YAML (an item of `cases:`).
    pub yaml: String,
}

/// The case a stored run gives, named `name` (default: the run's id and
/// the user's message).
///
/// # Errors
/// The run is unknown, its graph is not served, or the store failed.
pub(crate) async fn case_from_store(
    store: &dyn Store,
    catalog: &GraphCatalog,
    tools: &ToolRegistry,
    run: Uuid,
    name: Option<&str>,
) -> Result<SavedCase, String> {
    let (record, events) = crate::replay::load(store, run)
        .await
        .map_err(|e| e.to_string())?;
    let graph = catalog.get(&record.graph).ok_or_else(|| {
        format!(
            "run {run} ran graph `{}`, which is not served here (or its file has errors)",
            record.graph
        )
    })?;
    let batches: Vec<_> = store
        .checkpoints(run, u32::MAX)
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|c| c.to_batch(run))
        .collect();
    let name = name.map_or_else(|| default_name(run, &record.input, graph), str::to_owned);
    let rec = Recorded {
        graph,
        input: &record.input,
        events: &events,
        batches: &batches,
        tools,
    };
    Ok(SavedCase {
        graph: record.graph.clone(),
        yaml: case_yaml(rec, &name),
        name,
    })
}

/// "run 0193…: the user's message" (cut to 60 characters).
fn default_name(run: Uuid, input: &serde_json::Value, graph: &crate::nodes::Graph) -> String {
    let text = graph
        .chat
        .text
        .as_deref()
        .and_then(|f| input.get(f))
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let short: String = text.chars().take(60).collect();
    let id = run.simple().to_string();
    if short.is_empty() {
        format!("run {}", &id[..12])
    } else {
        format!("run {}: {short}", &id[..12])
    }
}

/// Where a graph's recorded cases go by default:
/// `GRAPHS/tests/GRAPH_recorded.yaml`.
pub(crate) fn default_case_file(graphs_dir: &Path, graph: &str) -> PathBuf {
    graphs_dir
        .join(super::TESTS_DIR)
        .join(format!("{graph}_recorded.yaml"))
}

/// Adds `case` to `file` (created with a header for its graph when
/// missing), renaming it `NAME (2)`, … if the file has a case of that name.
/// Returns the name it got.
///
/// # Errors
/// The file cannot be read or written, or is not a test file that a case
/// can be appended to (it is left as it was).
pub(crate) fn add_case(file: &Path, case: &SavedCase) -> Result<String, String> {
    let old = match std::fs::read_to_string(file) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let names: Vec<String> = match &old {
        Some(text) => parse_test_file(file, text)
            .map_err(|d| format!("{} does not parse as a test file: {}", file.display(), d[0]))?
            .cases
            .iter()
            .map(|c| c.name.value.clone())
            .collect(),
        None => Vec::new(),
    };
    let mut name = case.name.clone();
    let mut n = 2;
    while names.contains(&name) {
        name = format!("{} ({n})", case.name);
        n += 1;
    }
    let yaml = if name == case.name {
        case.yaml.clone()
    } else {
        case.yaml.replacen(
            &format!(
                "  - name: {}",
                serde_json::to_string(&case.name).unwrap_or_default()
            ),
            &format!(
                "  - name: {}",
                serde_json::to_string(&name).unwrap_or_default()
            ),
            1,
        )
    };
    let mut text = old.clone().unwrap_or_else(|| file_header(&case.graph));
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&yaml);
    let parsed = parse_test_file(file, &text).map_err(|d| {
        format!(
            "the case does not fit at the end of {}: {}",
            file.display(),
            d[0]
        )
    })?;
    if parsed.cases.len() != names.len() + 1 {
        return Err(format!(
            "{} does not end with its `cases:` list, so the case cannot be appended; give another file",
            file.display()
        ));
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(name)
}
