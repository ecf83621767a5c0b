//! The three SQL tools a model calls: `list_sources`, `query_source` and
//! `compare_sources`. Each parses its arguments, asks [`super::build`] for
//! SQL, runs it through [`SqlSources::run`] and shapes the result.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::build::{self, Agg, QueryArgs};
use super::compare::{Names, compare};
use super::{PARTITION, SqlSources};
use crate::tools::{Tool, ToolError, ToolPolicy, ToolSpec};

/// Groups per side of a comparison at most.
const MAX_COMPARE_GROUPS: usize = 10_000;

fn spec(name: &str, description: &str, schema: Value, sources: &SqlSources) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: Arc::new(schema),
        output_schema: None,
        partition: PARTITION.into(),
        // Waiting for a connection comes on top of the statement's own limit.
        policy: ToolPolicy {
            timeout: sources.statement_timeout + Duration::from_secs(15),
            ..ToolPolicy::default()
        },
    }
}

/// Arguments the schema let through but serde does not accept.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::Validation {
        message: format!("invalid arguments: {e}"),
        details: Value::Null,
    })
}

fn filters_schema() -> Value {
    json!({
        "type": "object",
        "description": "Dimension → value, or → list of values (any of them).",
        "additionalProperties": {"anyOf": [
            {"type": ["string", "number", "boolean", "null"]},
            {"type": "array", "items": {"type": ["string", "number", "boolean"]}}
        ]}
    })
}

/// `list_sources`: what can be queried.
#[derive(Debug)]
pub(crate) struct ListSources {
    spec: ToolSpec,
    sources: Arc<SqlSources>,
}

impl ListSources {
    /// The tool over `sources`.
    pub(crate) fn new(sources: Arc<SqlSources>) -> Self {
        let spec = spec(
            "list_sources",
            "List the data sources you can query: name, description, dimension columns (to filter and group by) and measure columns (to aggregate).",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            &sources,
        );
        Self { spec, sources }
    }
}

impl Tool for ListSources {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, _args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let s = &self.sources;
            Ok(json!({
                "sources": s.sources.values().map(super::Source::describe).collect::<Vec<_>>(),
                "aggregations": ["sum", "avg", "min", "max", "count"],
                "row_limit": s.row_limit,
                "compare_thresholds_pct": {"minor": s.thresholds.minor_pct, "major": s.thresholds.major_pct},
            }))
        })
    }
}

/// `query_source`: filtered, grouped, aggregated rows of one source.
#[derive(Debug)]
pub(crate) struct QuerySource {
    spec: ToolSpec,
    sources: Arc<SqlSources>,
}

impl QuerySource {
    /// The tool over `sources`.
    pub(crate) fn new(sources: Arc<SqlSources>) -> Self {
        let spec = spec(
            "query_source",
            "Query one data source. Without group_by and measures, returns its rows; with them, one row per group \
             with each measure aggregated (output column `<agg>_<column>`, e.g. `sum_amount`). Filters match \
             dimension values exactly. Call list_sources first to see the sources and their columns.",
            json!({
                "type": "object",
                "properties": {
                    "source": {"type": "string", "description": "A source name from list_sources."},
                    "filters": filters_schema(),
                    "group_by": {"type": "array", "items": {"type": "string"}, "description": "Dimensions to group by."},
                    "measures": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"column": {"type": "string"}, "agg": {"enum": ["sum", "avg", "min", "max", "count"]}},
                        "required": ["column", "agg"],
                        "additionalProperties": false
                    }},
                    "order_by": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"column": {"type": "string", "description": "An output column."}, "direction": {"enum": ["asc", "desc"]}},
                        "required": ["column"],
                        "additionalProperties": false
                    }},
                    "limit": {"type": "integer", "minimum": 1}
                },
                "required": ["source"],
                "additionalProperties": false
            }),
            &sources,
        );
        Self { spec, sources }
    }
}

impl Tool for QuerySource {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let args: QueryArgs = parse(args)?;
            let src = self.sources.source(&args.source)?;
            let plan = build::query(src, &args, self.sources.row_limit)?;
            let rows = self.sources.run(&plan.statement).await?;
            let mut out: Vec<Value> = Vec::with_capacity(rows.len().min(plan.limit));
            for row in rows.iter().take(plan.limit) {
                out.push(
                    row.try_get::<_, Value>(0).map_err(|_| {
                        ToolError::Execution("a result row could not be read".into())
                    })?,
                );
            }
            let truncated = rows.len() > plan.limit;
            let mut result = json!({ "source": src.name, "columns": plan.columns, "row_count": out.len(), "rows": out, "truncated": truncated });
            if truncated {
                result["note"] = json!(format!(
                    "only the first {} rows are shown; narrow the filters or group by fewer dimensions",
                    plan.limit
                ));
            }
            Ok(result)
        })
    }
}

/// `compare_sources` arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompareArgs {
    left: String,
    right: String,
    #[serde(default)]
    on: Vec<String>,
    measure: String,
    #[serde(default)]
    agg: Agg,
    #[serde(default)]
    filters: Map<String, Value>,
}

/// `compare_sources`: two sources aligned on dimensions, differences classed.
#[derive(Debug)]
pub(crate) struct CompareSources {
    spec: ToolSpec,
    sources: Arc<SqlSources>,
}

impl CompareSources {
    /// The tool over `sources`.
    pub(crate) fn new(sources: Arc<SqlSources>) -> Self {
        let t = sources.thresholds;
        let description = format!(
            "Compare a measure between two sources, aligned on dimensions (`on`) that both have, after the same filters. \
             Per key: left and right values, difference (right − left), difference_pct (relative to left) and class: \
             match (|pct| ≤ {}%), minor (≤ {}%) or major (more, or the key exists on one side only). Returns a \
             summary (counts per class, totals, max abs difference), the top differences and the rows.",
            t.minor_pct, t.major_pct
        );
        let spec = spec(
            "compare_sources",
            &description,
            json!({
                "type": "object",
                "properties": {
                    "left": {"type": "string", "description": "The reference source."},
                    "right": {"type": "string", "description": "The source compared against it."},
                    "on": {"type": "array", "items": {"type": "string"}, "description": "Dimensions both sources have; empty compares the totals."},
                    "measure": {"type": "string", "description": "A measure column both sources have."},
                    "agg": {"enum": ["sum", "avg", "min", "max", "count"], "description": "How values are aggregated per key (default sum)."},
                    "filters": filters_schema()
                },
                "required": ["left", "right", "measure"],
                "additionalProperties": false
            }),
            &sources,
        );
        Self { spec, sources }
    }
}

impl Tool for CompareSources {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let args: CompareArgs = parse(args)?;
            let s = &self.sources;
            let (left, right) = (s.source(&args.left)?, s.source(&args.right)?);
            let mut on = Vec::new();
            for d in &args.on {
                let c = left.column(d, "dimension")?;
                right.column(d, "dimension")?;
                if !on.contains(&c) {
                    on.push(c);
                }
            }
            let kind = if matches!(args.agg, Agg::Sum | Agg::Avg) {
                "measure"
            } else {
                "column"
            };
            let measure = left.column(&args.measure, kind)?;
            right.column(&args.measure, kind)?;
            let both = [left, right];
            let l = build::compare_side(
                left,
                &on,
                &measure,
                args.agg,
                &args.filters,
                &both,
                MAX_COMPARE_GROUPS,
            )?;
            let r = build::compare_side(
                right,
                &on,
                &measure,
                args.agg,
                &args.filters,
                &both,
                MAX_COMPARE_GROUPS,
            )?;
            let (l, r) = futures::future::try_join(s.run(&l), s.run(&r)).await?;
            let mut sides = Vec::with_capacity(2);
            for (rows, name) in [(l, &left.name), (r, &right.name)] {
                if rows.len() > MAX_COMPARE_GROUPS {
                    return Err(ToolError::Validation {
                        message: format!(
                            "`{name}` has more than {MAX_COMPARE_GROUPS} keys to compare; add filters or use fewer `on` dimensions"
                        ),
                        details: json!({ "source": name, "max_keys": MAX_COMPARE_GROUPS }),
                    });
                }
                let mut side = Vec::with_capacity(rows.len());
                for row in rows {
                    let key: Value = row.try_get(0).map_err(|_| {
                        ToolError::Execution("a result row could not be read".into())
                    })?;
                    let value: Option<f64> = row.try_get(1).map_err(|_| {
                        ToolError::Execution("a result row could not be read".into())
                    })?;
                    side.push((key, value.unwrap_or(0.0)));
                }
                sides.push(side);
            }
            let right_rows = sides.pop().unwrap_or_default();
            let left_rows = sides.pop().unwrap_or_default();
            let names = Names {
                left: &left.name,
                right: &right.name,
                on: &on,
                row_limit: s.row_limit,
            };
            let mut result = compare(&names, left_rows, right_rows, &s.thresholds);
            let head = json!({
                "left": left.name, "right": right.name, "on": on, "measure": measure, "agg": args.agg.name(),
                "filters": args.filters, "thresholds_pct": {"minor": s.thresholds.minor_pct, "major": s.thresholds.major_pct},
            });
            if let (Value::Object(r), Value::Object(h)) = (&mut result, head) {
                for (k, v) in h {
                    r.insert(k, v);
                }
            }
            Ok(result)
        })
    }
}
