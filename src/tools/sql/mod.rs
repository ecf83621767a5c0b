//! SQL sources (partition `data`): named PostgreSQL tables and queries a
//! model can list, query and compare — without ever writing SQL.
//!
//! An operator declares each source in config (a table or a `SELECT`, its
//! dimension columns and its measure columns); the model only names sources
//! and columns and gives filter values. That split is the security model:
//! every identifier in generated SQL is one the operator declared (a model's
//! column name is looked up, never interpolated), every value is a bind
//! parameter, and statements run in a `READ ONLY` transaction with a
//! statement timeout and a row limit. Source queries are checked at startup
//! to be one `SELECT`; anything that still tries to write fails at run time
//! as a read-only violation. A database role with only `SELECT` rights is
//! still the recommended setup.
//!
//! Three tools ([`tools`]): `list_sources`, `query_source` (filters,
//! group-by, aggregates, ordering) and `compare_sources` (two sources
//! aligned on dimensions, each difference classed `match`, `minor` or
//! `major` by the configured thresholds). Mistakes come back structured so
//! a model can correct itself: an unknown source is `not_found` with the
//! available sources, an unknown column a `validation_error` with the valid
//! ones, a database failure an `execution_error` with a safe message.
//!
//! ```toml
//! [tools.sql]
//! database_url = "postgres://reader@127.0.0.1:5432/reporting"
//! row_limit = 200
//! statement_timeout = "10s"
//! thresholds = { minor_pct = 0.0, major_pct = 5.0 }
//!
//! [tools.sql.sources.fi_reporting]
//! table = "fi_reporting"
//! description = "Financial accounting (FI) postings per company, period and account."
//! dimensions = ["company", "period", "account", "currency"]
//! measures = ["amount"]
//!
//! [tools.sql.sources.revenue_by_company]
//! query = "SELECT company, period, sum(amount) AS amount FROM fi_reporting WHERE account LIKE '4%' GROUP BY 1, 2"
//! dimensions = ["company", "period"]
//! measures = ["amount"]
//! ```
//!
//! `tests/fixtures/sql/demo.sql` is a demo database for this configuration.

mod build;
mod compare;
mod exec;
mod tools;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use serde::Deserialize;
use serde_json::{Value, json};

pub(crate) use tools::{CompareSources, ListSources, QuerySource};

use super::{RegistryError, Tool, ToolError, ToolRegistry};
use crate::units::Dur;

/// The partition of the SQL tools.
pub(crate) const PARTITION: &str = "data";

/// `[tools.sql]`: the database and its sources.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SqlConfig {
    /// `postgres://user@host:port/database`.
    pub database_url: String,
    /// Sources by name.
    pub sources: BTreeMap<String, SourceConfig>,
    /// Rows returned at most by one call.
    pub row_limit: usize,
    /// Time limit of one statement (enforced by PostgreSQL).
    pub statement_timeout: Dur,
    /// Connections at most.
    pub pool_size: usize,
    /// How `compare_sources` classes differences.
    pub thresholds: Thresholds,
}

impl Default for SqlConfig {
    fn default() -> Self {
        Self {
            database_url: String::new(),
            sources: BTreeMap::new(),
            row_limit: 200,
            statement_timeout: Dur(Duration::from_secs(10)),
            pool_size: 4,
            thresholds: Thresholds::default(),
        }
    }
}

/// One source: a table or a query, with the columns a model may use.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// A table or view (`name` or `schema.name`); exclusive with `query`.
    #[serde(default)]
    pub table: Option<String>,
    /// One `SELECT` (or `WITH … SELECT`); exclusive with `table`.
    #[serde(default)]
    pub query: Option<String>,
    /// What it holds (shown to the model).
    #[serde(default)]
    pub description: String,
    /// Columns to filter and group by.
    #[serde(default)]
    pub dimensions: Vec<String>,
    /// Numeric columns to aggregate.
    #[serde(default)]
    pub measures: Vec<String>,
}

/// Percentage thresholds classing a difference relative to the left value:
/// up to `minor_pct` is a `match`, up to `major_pct` is `minor`, beyond is
/// `major`. A key present on one side only, or a difference from zero, is
/// always `major`; an exact match always a `match`.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Differences up to this percentage still match.
    pub minor_pct: f64,
    /// Differences beyond this percentage are major.
    pub major_pct: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            minor_pct: 0.0,
            major_pct: 5.0,
        }
    }
}

/// Errors setting up the SQL tools (all are configuration mistakes).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The database URL does not parse.
    #[error("invalid tools.sql.database_url: {0}")]
    Url(String),
    /// A source is declared wrongly.
    #[error("tools.sql.sources.{name}: {message}")]
    Source {
        /// The source name.
        name: String,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// Another setting is out of range.
    #[error("tools.sql: {0}")]
    Setting(String),
    /// The registry refused the tools.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Registers `list_sources`, `query_source` and `compare_sources` as the
/// partition `data` (replacing what it held). Does not connect: the
/// pool connects on the first call, so a database that is down at startup
/// only fails calls.
///
/// # Errors
/// Invalid configuration, or a tool name taken by another partition.
pub fn register(registry: &ToolRegistry, cfg: &SqlConfig) -> Result<(), SetupError> {
    let sources = Arc::new(SqlSources::new(cfg)?);
    registry.set_partition(PARTITION, tools(&sources))?;
    Ok(())
}

/// Makes the partition known without a database (graph files that use it
/// validate; a node using it is offered no tools until [`register`]).
pub fn declare(registry: &ToolRegistry) {
    registry.declare_partition(PARTITION);
}

/// The three tools over `sources`.
pub(crate) fn tools(sources: &Arc<SqlSources>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ListSources::new(Arc::clone(sources))),
        Arc::new(QuerySource::new(Arc::clone(sources))),
        Arc::new(CompareSources::new(Arc::clone(sources))),
    ]
}

/// A validated source.
#[derive(Debug)]
struct Source {
    name: String,
    /// The `FROM` item: a quoted table name or a parenthesized query.
    from: String,
    kind: &'static str,
    description: String,
    dimensions: Vec<String>,
    measures: Vec<String>,
}

impl Source {
    fn new(name: &str, cfg: &SourceConfig) -> Result<Self, SetupError> {
        let bad = |message: String| SetupError::Source {
            name: name.to_owned(),
            message,
        };
        let (from, kind) = match (&cfg.table, &cfg.query) {
            (Some(t), None) => {
                let parts: Vec<&str> = t.split('.').collect();
                if parts.len() > 2 || !parts.iter().all(|p| is_identifier(p)) {
                    return Err(bad(format!(
                        "`{t}` is not a table name; write `table` or `schema.table`"
                    )));
                }
                (
                    parts
                        .iter()
                        .map(|p| build::ident(p))
                        .collect::<Vec<_>>()
                        .join("."),
                    "table",
                )
            }
            (None, Some(q)) => (format!("({})", check_query(q).map_err(bad)?), "query"),
            _ => return Err(bad("give exactly one of `table` or `query`".into())),
        };
        if cfg.dimensions.is_empty() && cfg.measures.is_empty() {
            return Err(bad(
                "declare at least one column in `dimensions` or `measures`".into(),
            ));
        }
        let mut seen = Vec::new();
        for c in cfg.dimensions.iter().chain(&cfg.measures) {
            if !is_identifier(c) {
                return Err(bad(format!(
                    "`{c}` is not a column name (letters, digits and `_`)"
                )));
            }
            if seen.contains(&c) {
                return Err(bad(format!("column `{c}` is declared twice")));
            }
            seen.push(c);
        }
        Ok(Self {
            name: name.to_owned(),
            from,
            kind,
            description: cfg.description.trim().to_owned(),
            dimensions: cfg.dimensions.clone(),
            measures: cfg.measures.clone(),
        })
    }

    fn is_dimension(&self, c: &str) -> bool {
        self.dimensions.iter().any(|d| d == c)
    }

    fn is_measure(&self, c: &str) -> bool {
        self.measures.iter().any(|m| m == c)
    }

    /// The declared spelling of column `c` of `kind` (`dimension`,
    /// `measure`, or `column` for either), or an error listing the valid
    /// ones.
    fn column(&self, c: &str, kind: &str) -> Result<String, ToolError> {
        let ok = match kind {
            "dimension" => self.is_dimension(c),
            "measure" => self.is_measure(c),
            _ => self.is_dimension(c) || self.is_measure(c),
        };
        if ok {
            return Ok(c.to_owned());
        }
        let what = if self.is_dimension(c) || self.is_measure(c) {
            format!("`{c}` is not a {kind} of source `{}`", self.name)
        } else {
            format!("source `{}` has no column `{c}`", self.name)
        };
        Err(ToolError::Validation {
            message: format!("{what}; use one of the columns listed in details"),
            details: json!({ "source": self.name, "column": c, "expected": kind, "dimensions": self.dimensions, "measures": self.measures }),
        })
    }

    fn describe(&self) -> Value {
        json!({ "name": self.name, "kind": self.kind, "description": self.description, "dimensions": self.dimensions, "measures": self.measures })
    }
}

/// The declared sources and the pool they are read through.
pub(crate) struct SqlSources {
    sources: BTreeMap<String, Source>,
    pool: Pool,
    row_limit: usize,
    statement_timeout: Duration,
    thresholds: Thresholds,
}

impl std::fmt::Debug for SqlSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSources")
            .field("sources", &self.sources.keys())
            .field("row_limit", &self.row_limit)
            .finish()
    }
}

impl SqlSources {
    /// Validates `cfg` and builds the (not yet connected) pool.
    ///
    /// # Errors
    /// An invalid URL, source or setting.
    pub(crate) fn new(cfg: &SqlConfig) -> Result<Self, SetupError> {
        if cfg.row_limit == 0 || cfg.row_limit > 10_000 {
            return Err(SetupError::Setting(
                "row_limit must be between 1 and 10000".into(),
            ));
        }
        let t = cfg.thresholds;
        if !(t.minor_pct >= 0.0 && t.major_pct >= t.minor_pct && t.major_pct.is_finite()) {
            return Err(SetupError::Setting(
                "thresholds need 0 <= minor_pct <= major_pct".into(),
            ));
        }
        let timeout = cfg.statement_timeout.0;
        if timeout < Duration::from_millis(1) {
            return Err(SetupError::Setting(
                "statement_timeout must be at least 1ms".into(),
            ));
        }
        let sources = cfg
            .sources
            .iter()
            .map(|(n, s)| Ok((n.clone(), Source::new(n, s)?)))
            .collect::<Result<_, SetupError>>()?;
        Ok(Self {
            sources,
            pool: exec::pool(&cfg.database_url, cfg.pool_size)?,
            row_limit: cfg.row_limit,
            statement_timeout: timeout,
            thresholds: t,
        })
    }

    /// Source names.
    pub(crate) fn names(&self) -> Vec<String> {
        self.sources.keys().cloned().collect()
    }

    /// The source `name`, or `not_found` listing the available ones (the
    /// closest first when one is close).
    fn source(&self, name: &str) -> Result<&Source, ToolError> {
        if let Some(s) = self.sources.get(name) {
            return Ok(s);
        }
        let closest = self
            .sources
            .keys()
            .map(|k| {
                (
                    strsim::jaro_winkler(&k.to_lowercase(), &name.to_lowercase()),
                    k,
                )
            })
            .filter(|(score, _)| *score > 0.8)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, k)| k.clone());
        let hint = closest
            .as_ref()
            .map_or(String::new(), |c| format!(" — did you mean `{c}`?"));
        Err(ToolError::NotFound {
            message: format!("no source named `{name}`{hint}"),
            details: json!({ "source": name, "available": self.names(), "did_you_mean": closest }),
        })
    }
}

/// An unquoted-style SQL identifier: a letter or `_`, then letters, digits,
/// `_` or `$`; at most 63 bytes (PostgreSQL's limit).
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && s.len() <= 63
}

/// A source query must be one read statement: it is embedded as a
/// subquery, so it may not end a statement and start another.
fn check_query(q: &str) -> Result<String, String> {
    let q = q
        .trim()
        .trim_end_matches(|c: char| c == ';' || c.is_whitespace());
    if q.contains(';') {
        return Err("a source query must be a single statement (no `;`)".into());
    }
    let first = q
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if !matches!(first.as_str(), "select" | "with" | "values" | "table") {
        return Err(format!(
            "a source query must be a SELECT (it starts with `{first}`)"
        ));
    }
    Ok(q.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(
        table: Option<&str>,
        query: Option<&str>,
        dims: &[&str],
    ) -> Result<Source, SetupError> {
        let cfg = SourceConfig {
            table: table.map(Into::into),
            query: query.map(Into::into),
            dimensions: dims.iter().map(|s| s.to_string()).collect(),
            measures: vec!["amount".into()],
            ..SourceConfig::default()
        };
        Source::new("s", &cfg)
    }

    #[test]
    fn sources_are_checked_when_configured() {
        assert_eq!(
            source(Some("public.fi"), None, &["company"]).unwrap().from,
            r#""public"."fi""#
        );
        assert!(source(Some("fi; DROP TABLE x"), None, &[]).is_err());
        assert!(source(Some("a.b.c"), None, &[]).is_err());
        assert!(
            source(None, None, &[]).is_err() && source(Some("a"), Some("SELECT 1"), &[]).is_err()
        );
        assert_eq!(
            source(None, Some(" select * from t ;\n"), &[])
                .unwrap()
                .from,
            "(select * from t)"
        );
        assert!(source(None, Some("SELECT 1; DROP TABLE t"), &[]).is_err());
        assert!(source(None, Some("DELETE FROM t RETURNING *"), &[]).is_err());
        assert!(source(Some("t"), None, &["bad name"]).is_err());
        assert!(
            source(Some("t"), None, &["amount"]).is_err(),
            "declared twice"
        );
    }

    #[test]
    fn an_unknown_source_lists_the_available_ones() {
        let mut cfg = SqlConfig {
            database_url: "postgres://u@127.0.0.1/db".into(),
            ..SqlConfig::default()
        };
        for n in ["fi_reporting", "bpc_reporting"] {
            cfg.sources.insert(
                n.into(),
                SourceConfig {
                    table: Some(n.into()),
                    measures: vec!["amount".into()],
                    ..SourceConfig::default()
                },
            );
        }
        let s = SqlSources::new(&cfg).unwrap();
        let f = s.source("fi_report").unwrap_err().to_failure();
        assert_eq!(f.kind, "not_found");
        assert_eq!(
            f.details["available"],
            json!(["bpc_reporting", "fi_reporting"])
        );
        assert_eq!(f.details["did_you_mean"], "fi_reporting");
        assert!(s.source("zzz").unwrap_err().to_failure().details["did_you_mean"].is_null());
        cfg.thresholds = Thresholds {
            minor_pct: 5.0,
            major_pct: 1.0,
        };
        assert!(SqlSources::new(&cfg).is_err());
    }
}
