//! SQL text from a model's request — the one place SQL is written.
//!
//! Pure functions: each takes a validated [`Source`] and the model's
//! arguments and returns a [`Statement`]. Identifiers come from the source's
//! declared columns (a model's name is only used to look one up) and are
//! quoted; values only ever travel as bind parameters. Filters compare the
//! column's text form (`col::text = $1::text`), so one parameter type fits
//! every column type and a model may give `1001` or `"1001"` alike.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Source;
use crate::tools::ToolError;

/// Values in one list filter at most.
const MAX_FILTER_VALUES: usize = 1000;

/// A bind parameter.
#[derive(Debug, PartialEq)]
pub(super) enum Param {
    /// `$n::text`.
    Text(String),
    /// `$n::text[]`.
    List(Vec<String>),
}

/// Generated SQL and its parameters.
#[derive(Debug)]
pub(super) struct Statement {
    pub(super) sql: String,
    pub(super) params: Vec<Param>,
}

/// An aggregate function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Agg {
    #[default]
    Sum,
    Avg,
    Min,
    Max,
    Count,
}

impl Agg {
    pub(super) fn name(self) -> &'static str {
        match self {
            Agg::Sum => "sum",
            Agg::Avg => "avg",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Count => "count",
        }
    }
}

/// `{column, agg}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MeasureArg {
    column: String,
    agg: Agg,
}

/// Sort direction.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Direction {
    #[default]
    Asc,
    Desc,
}

/// `{column, direction}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OrderArg {
    column: String,
    #[serde(default)]
    direction: Direction,
}

/// `query_source` arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QueryArgs {
    pub(super) source: String,
    #[serde(default)]
    pub(super) filters: Map<String, Value>,
    #[serde(default)]
    group_by: Vec<String>,
    #[serde(default)]
    measures: Vec<MeasureArg>,
    #[serde(default)]
    order_by: Vec<OrderArg>,
    #[serde(default)]
    limit: Option<u64>,
}

/// A checked `query_source` request.
#[derive(Debug)]
pub(super) struct QueryPlan {
    /// Output columns, in order.
    pub(super) columns: Vec<String>,
    pub(super) statement: Statement,
    /// Rows returned at most (one more is fetched to tell truncation).
    pub(super) limit: usize,
}

/// A quoted identifier.
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A filter value as text; `None` for JSON null.
fn text_value(column: &str, v: &Value) -> Result<Option<String>, ToolError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        _ => Err(ToolError::Validation {
            message: format!("filter `{column}` needs a value or a list of values"),
            details: json!({ "column": column, "value": v }),
        }),
    }
}

/// The `WHERE` clause for `filters` (dimensions of every source in
/// `sources`), pushing its parameters.
pub(super) fn where_clause(
    sources: &[&Source],
    filters: &Map<String, Value>,
    params: &mut Vec<Param>,
) -> Result<String, ToolError> {
    let mut conds = Vec::new();
    for (column, value) in filters {
        let mut col = String::new();
        for s in sources {
            col = s.column(column, "dimension")?;
        }
        let c = ident(&col);
        match value {
            Value::Array(items) => {
                if items.len() > MAX_FILTER_VALUES {
                    return Err(ToolError::Validation {
                        message: format!(
                            "filter `{column}` lists more than {MAX_FILTER_VALUES} values"
                        ),
                        details: json!({ "column": column }),
                    });
                }
                let values = items
                    .iter()
                    .map(|v| text_value(column, v))
                    .collect::<Result<Vec<_>, _>>()?;
                params.push(Param::List(values.into_iter().flatten().collect()));
                conds.push(format!("{c}::text = ANY(${}::text[])", params.len()));
            }
            v => match text_value(column, v)? {
                Some(t) => {
                    params.push(Param::Text(t));
                    conds.push(format!("{c}::text = ${}::text", params.len()));
                }
                None => conds.push(format!("{c} IS NULL")),
            },
        }
    }
    Ok(if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    })
}

/// Plans a `query_source` call.
pub(super) fn query(
    src: &Source,
    args: &QueryArgs,
    row_limit: usize,
) -> Result<QueryPlan, ToolError> {
    let mut params = Vec::new();
    let filter = where_clause(&[src], &args.filters, &mut params)?;
    let mut group: Vec<String> = Vec::new();
    for g in &args.group_by {
        let c = src.column(g, "dimension")?;
        if !group.contains(&c) {
            group.push(c);
        }
    }
    let (columns, select) = selected(src, args, &group)?;
    let grouping = if group.is_empty() {
        String::new()
    } else {
        format!(
            " GROUP BY {}",
            group
                .iter()
                .map(|c| ident(c))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let order = ordering(src, args, &group, &columns)?;
    let limit = args
        .limit
        .map_or(row_limit, |l| (l as usize).clamp(1, row_limit));
    let sql = format!(
        "SELECT to_jsonb(r) FROM (SELECT {} FROM {} AS s{filter}{grouping}) AS r{order} LIMIT {}",
        select.join(", "),
        src.from,
        limit + 1
    );
    Ok(QueryPlan {
        columns,
        statement: Statement { sql, params },
        limit,
    })
}

/// The output columns and their select expressions: every column without
/// groups or measures, else the groups then each measure's aggregate.
fn selected(
    src: &Source,
    args: &QueryArgs,
    group: &[String],
) -> Result<(Vec<String>, Vec<String>), ToolError> {
    let mut columns = Vec::new();
    let mut select = Vec::new();
    if group.is_empty() && args.measures.is_empty() {
        for c in src.dimensions.iter().chain(&src.measures) {
            columns.push(c.clone());
            select.push(ident(c));
        }
        return Ok((columns, select));
    }
    for c in group {
        columns.push(c.clone());
        select.push(ident(c));
    }
    for m in &args.measures {
        // Sums and averages need a measure; min, max and count work on any column.
        let kind = if matches!(m.agg, Agg::Sum | Agg::Avg) {
            "measure"
        } else {
            "column"
        };
        let c = src.column(&m.column, kind)?;
        let alias = format!("{}_{c}", m.agg.name());
        if columns.contains(&alias) {
            return Err(ToolError::Validation {
                message: format!("measure `{alias}` is asked for twice"),
                details: json!({ "measure": alias }),
            });
        }
        select.push(format!(
            "{}({}) AS {}",
            m.agg.name(),
            ident(&c),
            ident(&alias)
        ));
        columns.push(alias);
    }
    Ok((columns, select))
}

/// The `ORDER BY` clause: the asked order over output columns, or by the
/// dimensions shown (a stable default).
fn ordering(
    src: &Source,
    args: &QueryArgs,
    group: &[String],
    columns: &[String],
) -> Result<String, ToolError> {
    let mut order = Vec::new();
    for o in &args.order_by {
        if !columns.contains(&o.column) {
            return Err(ToolError::Validation {
                message: format!(
                    "cannot order by `{}`: it is not an output column of this query",
                    o.column
                ),
                details: json!({ "column": o.column, "output_columns": columns }),
            });
        }
        let dir = match o.direction {
            Direction::Asc => "ASC",
            Direction::Desc => "DESC",
        };
        order.push(format!("r.{} {dir} NULLS LAST", ident(&o.column)));
    }
    if order.is_empty() {
        // A stable default: by the dimensions shown.
        let dims = if group.is_empty() && args.measures.is_empty() {
            &src.dimensions[..]
        } else {
            group
        };
        order = dims.iter().map(|d| format!("r.{} ASC", ident(d))).collect();
    }
    Ok(if order.is_empty() {
        String::new()
    } else {
        format!(" ORDER BY {}", order.join(", "))
    })
}

/// One side of a comparison: `(key as a JSON array, aggregated value)` per
/// distinct combination of `on`, at most `max_groups + 1` rows.
pub(super) fn compare_side(
    src: &Source,
    on: &[String],
    measure: &str,
    agg: Agg,
    filters: &Map<String, Value>,
    both: &[&Source],
    max_groups: usize,
) -> Result<Statement, ToolError> {
    let mut params = Vec::new();
    let filter = where_clause(both, filters, &mut params)?;
    let keys: Vec<String> = on.iter().map(|c| ident(c)).collect();
    let grouping = if keys.is_empty() {
        String::new()
    } else {
        format!(" GROUP BY {}", keys.join(", "))
    };
    let order = if keys.is_empty() {
        String::new()
    } else {
        format!(" ORDER BY {}", keys.join(", "))
    };
    let sql = format!(
        "SELECT jsonb_build_array({}), {}({})::float8 FROM {} AS s{filter}{grouping}{order} LIMIT {}",
        keys.join(", "),
        agg.name(),
        ident(measure),
        src.from,
        max_groups + 1
    );
    Ok(Statement { sql, params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::sql::SourceConfig;

    fn fi() -> Source {
        let cfg = SourceConfig {
            table: Some("fi_reporting".into()),
            dimensions: vec!["company".into(), "period".into()],
            measures: vec!["amount".into()],
            ..SourceConfig::default()
        };
        Source::new("fi", &cfg).unwrap()
    }

    fn args(v: Value) -> QueryArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn grouped_queries_use_declared_names_and_bind_every_value() {
        let p = query(
            &fi(),
            &args(json!({"source": "fi", "filters": {"company": 1001, "period": ["2024-01", "2024-02"]},
                "group_by": ["period"], "measures": [{"column": "amount", "agg": "sum"}], "order_by": [{"column": "sum_amount", "direction": "desc"}], "limit": 5})),
            200,
        )
        .unwrap();
        assert_eq!(
            p.statement.sql,
            "SELECT to_jsonb(r) FROM (SELECT \"period\", sum(\"amount\") AS \"sum_amount\" FROM \"fi_reporting\" AS s \
             WHERE \"company\"::text = $1::text AND \"period\"::text = ANY($2::text[]) GROUP BY \"period\") AS r \
             ORDER BY r.\"sum_amount\" DESC NULLS LAST LIMIT 6"
        );
        assert_eq!(
            p.statement.params,
            [
                Param::Text("1001".into()),
                Param::List(vec!["2024-01".into(), "2024-02".into()])
            ]
        );
        assert_eq!(p.columns, ["period", "sum_amount"]);
    }

    #[test]
    fn plain_queries_select_the_declared_columns_and_cap_the_limit() {
        let p = query(
            &fi(),
            &args(json!({"source": "fi", "filters": {"period": null}, "limit": 100000})),
            200,
        )
        .unwrap();
        assert_eq!(
            p.statement.sql,
            "SELECT to_jsonb(r) FROM (SELECT \"company\", \"period\", \"amount\" FROM \"fi_reporting\" AS s WHERE \"period\" IS NULL) AS r \
             ORDER BY r.\"company\" ASC, r.\"period\" ASC LIMIT 201"
        );
        assert_eq!(p.limit, 200);
    }

    #[test]
    fn model_supplied_names_are_looked_up_never_interpolated() {
        let s = fi();
        for bad in [
            json!({"source": "fi", "group_by": ["company\"; DROP TABLE x; --"]}),
            json!({"source": "fi", "filters": {"amount": 1}}),
            json!({"source": "fi", "measures": [{"column": "period", "agg": "sum"}]}),
            json!({"source": "fi", "order_by": [{"column": "1; DROP TABLE x"}]}),
        ] {
            let e = query(&s, &args(bad.clone()), 10).unwrap_err().to_failure();
            assert_eq!(e.kind, "validation_error", "{bad}");
        }
        let e = query(&s, &args(json!({"source": "fi", "group_by": ["nope"]})), 10)
            .unwrap_err()
            .to_failure();
        assert_eq!(e.details["dimensions"], json!(["company", "period"]));
        assert_eq!(e.details["measures"], json!(["amount"]));
        assert!(
            query(
                &s,
                &args(json!({"source": "fi", "filters": {"company": {"$gt": 1}}})),
                10
            )
            .is_err()
        );
    }
}
