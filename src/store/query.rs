//! Which runs a listing returns: [`RunQuery`], shared by every backend.
//!
//! Filters are optional and combine with AND; results are newest first
//! (`created_at`, then id, both descending) and paged by a cursor — the
//! position of the last run of the previous page — so a page never repeats
//! or skips a run when new ones arrive. Filtering happens in the store, not
//! after it: one user's thousands of runs can never crowd another's out of
//! a page.

use uuid::Uuid;

use super::RunRecord;
use crate::events::RunStatus;

/// Where a page of runs continues: strictly older than this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunCursor {
    /// The last listed run's creation time (µs).
    pub created_at: u64,
    /// The last listed run's id.
    pub id: Uuid,
}

impl RunCursor {
    /// The cursor after `run`.
    pub fn after(run: &RunRecord) -> Self {
        Self {
            created_at: run.created_at,
            id: run.id,
        }
    }

    /// `created_at.id` (the form the API hands out).
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at, self.id.simple())
    }

    /// The inverse of [`RunCursor::encode`].
    pub fn decode(s: &str) -> Option<Self> {
        let (at, id) = s.split_once('.')?;
        Some(Self {
            created_at: at.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

/// A filtered page of runs, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunQuery {
    /// Only this user's runs.
    pub user: Option<String>,
    /// Only this chat's runs.
    pub chat: Option<String>,
    /// Only runs of this graph.
    pub graph: Option<String>,
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs created at or after this time (µs).
    pub since: Option<u64>,
    /// Only runs older than this position (the next page).
    pub before: Option<RunCursor>,
    /// At most this many.
    pub limit: usize,
}

impl RunQuery {
    /// Every run, newest first, at most `limit`.
    pub fn newest(limit: usize) -> Self {
        Self {
            user: None,
            chat: None,
            graph: None,
            status: None,
            since: None,
            before: None,
            limit,
        }
    }

    /// Only `user`'s runs.
    #[must_use]
    pub fn of_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Only `chat`'s runs.
    #[must_use]
    pub fn of_chat(mut self, chat: impl Into<String>) -> Self {
        self.chat = Some(chat.into());
        self
    }

    /// Whether `r` passes the filters (not the limit). The memory store
    /// lists with it; the SQL stores say the same in `WHERE`.
    pub fn matches(&self, r: &RunRecord) -> bool {
        self.user.as_ref().is_none_or(|u| r.user_id == *u)
            && self
                .chat
                .as_ref()
                .is_none_or(|c| r.chat_id.as_deref() == Some(c))
            && self.graph.as_ref().is_none_or(|g| r.graph == *g)
            && self.status.is_none_or(|s| r.status == s)
            && self.since.is_none_or(|t| r.created_at >= t)
            && self
                .before
                .is_none_or(|c| (r.created_at, r.id) < (c.created_at, c.id))
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// A value bound to a SQL placeholder.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SqlParam {
    Text(String),
    Int(i64),
    Id(Uuid),
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The `WHERE …` (empty when unfiltered) and its parameters, with
/// placeholders from `mark(n)` (n from 1): `?n` for SQLite, `$n` for
/// PostgreSQL. The limit is the last parameter.
pub(crate) fn where_clause(
    q: &RunQuery,
    mark: impl Fn(usize) -> String,
) -> (String, Vec<SqlParam>) {
    let mut conds = Vec::new();
    let mut params = Vec::new();
    let bind = |p: SqlParam, params: &mut Vec<SqlParam>| {
        params.push(p);
        mark(params.len())
    };
    if let Some(u) = &q.user {
        conds.push(format!(
            "user_id = {}",
            bind(SqlParam::Text(u.clone()), &mut params)
        ));
    }
    if let Some(c) = &q.chat {
        conds.push(format!(
            "chat_id = {}",
            bind(SqlParam::Text(c.clone()), &mut params)
        ));
    }
    if let Some(g) = &q.graph {
        conds.push(format!(
            "graph = {}",
            bind(SqlParam::Text(g.clone()), &mut params)
        ));
    }
    if let Some(s) = q.status {
        let name = super::sql::status_name(s).to_owned();
        conds.push(format!(
            "status = {}",
            bind(SqlParam::Text(name), &mut params)
        ));
    }
    if let Some(t) = q.since {
        let t = i64::try_from(t).unwrap_or(i64::MAX);
        conds.push(format!(
            "created_at >= {}",
            bind(SqlParam::Int(t), &mut params)
        ));
    }
    if let Some(c) = q.before {
        let at = i64::try_from(c.created_at).unwrap_or(i64::MAX);
        let at = bind(SqlParam::Int(at), &mut params);
        let id = bind(SqlParam::Id(c.id), &mut params);
        conds.push(format!(
            "(created_at < {at} OR (created_at = {at} AND id < {id}))"
        ));
    }
    let clause = if conds.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conds.join(" AND "))
    };
    (clause, params)
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The whole listing statement for `q`.
pub(crate) fn select(
    cols: &str,
    q: &RunQuery,
    mark: impl Fn(usize) -> String + Copy,
) -> (String, Vec<SqlParam>) {
    let (clause, mut params) = where_clause(q, mark);
    params.push(SqlParam::Int(super::sql::limit_of(q.limit)));
    let sql = format!(
        "SELECT {cols} FROM runs {clause} ORDER BY created_at DESC, id DESC LIMIT {}",
        mark(params.len())
    );
    (sql, params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    #[test]
    fn clauses_number_their_placeholders_in_order() {
        let mut q = RunQuery::newest(5).of_user("alice").of_chat("c1");
        q.status = Some(RunStatus::Finished);
        let (sql, params) = select("id", &q, |n| format!("${n}"));
        assert_eq!(
            sql,
            "SELECT id FROM runs WHERE user_id = $1 AND chat_id = $2 AND status = $3 ORDER BY created_at DESC, id DESC LIMIT $4"
        );
        assert_eq!(params.len(), 4);
        assert_eq!(params[3], SqlParam::Int(5));
    }

    #[test]
    fn cursors_round_trip() {
        let c = RunCursor {
            created_at: 42,
            id: Uuid::now_v7(),
        };
        assert_eq!(RunCursor::decode(&c.encode()), Some(c));
        assert_eq!(RunCursor::decode("x.y"), None);
        assert_eq!(RunCursor::decode("12"), None);
    }
}
