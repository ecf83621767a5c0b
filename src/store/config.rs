//! Which store to open: the `[store]` section of the config file, then the
//! environment.
//!
//! ```toml
//! [store]
//! backend = "postgres"          # "sqlite" (default) | "postgres" | "memory"
//! database_url = "postgres://postgres@127.0.0.1:5432/stategraph"
//! data_dir = "data"             # SQLite: data/stategraph.db
//! pool_size = 16                # PostgreSQL connections / SQLite readers
//! ```
//!
//! `DATABASE_URL`, when set, supplies `database_url`, and selects PostgreSQL
//! unless the file names a backend explicitly — so the usual deployment
//! convention works with no file, and an explicit `backend = "sqlite"` is
//! never silently overridden. The environment is passed in as a function so
//! tests never touch the process environment.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::memory::MemoryStore;
#[cfg(feature = "postgres")]
use super::postgres::{self, PostgresStore};
#[cfg(feature = "sqlite")]
use super::sqlite::{self, SqliteOptions, SqliteStore};
#[cfg(feature = "server")]
use super::{MigrationReport, StoreResult};
use super::{Store, StoreError};

/// The SQLite file's name inside `data_dir`.
pub const SQLITE_FILE: &str = "stategraph.db";

/// A store backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One SQLite file under `data_dir` (the embedded default).
    #[default]
    Sqlite,
    /// A PostgreSQL database at `database_url`.
    Postgres,
    /// Process memory (tests, demos): nothing survives a restart.
    Memory,
}

/// Finished runs the memory backend keeps by default.
pub(crate) const MEMORY_MAX_RUNS: usize = 1_000;
/// Chats the memory backend keeps by default.
pub(crate) const MEMORY_MAX_CHATS: usize = 1_000;

/// The store settings.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// The backend; `None` means SQLite unless `DATABASE_URL` is set
    /// (see [`StoreConfig::backend`]).
    pub backend: Option<Backend>,
    /// PostgreSQL URL, e.g. `postgres://postgres@127.0.0.1:5432/stategraph`.
    pub database_url: Option<String>,
    /// Directory of the SQLite file (default `data`).
    pub data_dir: Option<PathBuf>,
    /// PostgreSQL pool size (default 16) or SQLite reader threads (default 4).
    pub pool_size: Option<usize>,
    /// The memory backend keeps this many finished runs (default 1,000).
    pub memory_max_runs: Option<usize>,
    /// The memory backend keeps this many chats (default 1,000).
    pub memory_max_chats: Option<usize>,
}

impl std::fmt::Debug for StoreConfig {
    /// Hides the URL's password: configs get logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("backend", &self.backend)
            .field("database_url", &self.database_url.as_deref().map(redact))
            .field("data_dir", &self.data_dir)
            .field("pool_size", &self.pool_size)
            .field("memory_max_runs", &self.memory_max_runs)
            .field("memory_max_chats", &self.memory_max_chats)
            .finish()
    }
}

/// `scheme://user:secret@host/db` → `scheme://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl StoreConfig {
    /// Applies the process environment (`DATABASE_URL`).
    pub fn with_env(self) -> Self {
        self.with_env_from(|k| std::env::var(k).ok())
    }

    /// Applies the environment as `env` reports it: `DATABASE_URL`, if set
    /// and not blank, replaces `database_url`.
    pub fn with_env_from(mut self, env: impl Fn(&str) -> Option<String>) -> Self {
        if let Some(url) = env("DATABASE_URL")
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
        {
            self.database_url = Some(url);
        }
        self
    }

    /// The backend to open: the explicit one, else PostgreSQL when a
    /// `database_url` is known, else SQLite.
    pub fn backend(&self) -> Backend {
        self.backend.unwrap_or(if self.database_url.is_some() {
            Backend::Postgres
        } else {
            Backend::Sqlite
        })
    }

    /// The SQLite database file.
    pub fn sqlite_path(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("data"))
            .join(SQLITE_FILE)
    }

    #[cfg(feature = "postgres")]
    fn url(&self) -> StoreResult<&str> {
        self.database_url.as_deref().ok_or_else(|| {
            StoreError::Backend(
                "the postgres store needs `database_url` in [store] or the DATABASE_URL variable"
                    .into(),
            )
        })
    }
}

/// Opens (and migrates) the configured store.
///
/// # Errors
/// PostgreSQL without a URL, or the backend's own open errors (unreachable
/// server, unwritable data directory, a newer schema than this build).
pub async fn open(config: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match config.backend() {
        Backend::Memory => Arc::new(MemoryStore::bounded(
            config.memory_max_runs.unwrap_or(MEMORY_MAX_RUNS),
            config.memory_max_chats.unwrap_or(MEMORY_MAX_CHATS),
        )),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            let mut options = SqliteOptions::default();
            if let Some(n) = config.pool_size {
                options.readers = n.max(1);
            }
            Arc::new(SqliteStore::open_with(config.sqlite_path(), options).await?)
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let size = config.pool_size.unwrap_or(postgres::DEFAULT_POOL_SIZE);
            Arc::new(PostgresStore::connect(config.url()?, size).await?)
        }
        #[allow(unreachable_patterns)]
        other => return Err(not_built(other)),
    })
}

/// Brings the configured database to this build's schema (`stategraph
/// migrate`); the memory backend has nothing to migrate.
///
/// # Errors
/// As [`open`].
#[cfg(feature = "server")]
pub async fn migrate(config: &StoreConfig) -> StoreResult<MigrationReport> {
    match config.backend() {
        Backend::Memory => Ok(MigrationReport {
            from: 0,
            to: 0,
            applied: Vec::new(),
        }),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::migrate(config.sqlite_path()).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::migrate(config.url()?).await,
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// A backend this build leaves out (its cargo feature is off).
#[allow(dead_code)]
fn not_built(backend: Backend) -> StoreError {
    StoreError::Backend(format!(
        "this build has no {backend:?} store (enable the `{}` feature)",
        format!("{backend:?}").to_lowercase()
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env_with_url(k: &str) -> Option<String> {
        (k == "DATABASE_URL").then(|| "postgres://app:hunter2@db:5432/sg".to_owned())
    }

    #[test]
    fn defaults_to_sqlite_under_data() {
        let c = StoreConfig::default().with_env_from(|_| None);
        assert_eq!(c.backend(), Backend::Sqlite);
        assert_eq!(c.sqlite_path(), PathBuf::from("data").join("stategraph.db"));
    }

    #[test]
    fn database_url_selects_postgres_unless_a_backend_is_explicit() {
        let c = StoreConfig::default().with_env_from(env_with_url);
        assert_eq!(
            (c.backend(), c.database_url.as_deref()),
            (Backend::Postgres, Some("postgres://app:hunter2@db:5432/sg"))
        );
        let explicit: StoreConfig =
            toml::from_str("backend = \"sqlite\"\ndata_dir = \"/var/sg\"").unwrap();
        let c = explicit.with_env_from(env_with_url);
        assert_eq!(c.backend(), Backend::Sqlite);
        assert_eq!(c.sqlite_path(), PathBuf::from("/var/sg/stategraph.db"));
        let blank = StoreConfig::default().with_env_from(|_| Some("  ".into()));
        assert_eq!(blank.backend(), Backend::Sqlite);
    }

    #[test]
    fn files_are_strict_and_debug_hides_passwords() {
        let e = toml::from_str::<StoreConfig>("backend = \"mysql\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mysql"), "{e}");
        assert!(toml::from_str::<StoreConfig>("pool = 3").is_err());
        let c: StoreConfig = toml::from_str("backend = \"memory\"\npool_size = 3").unwrap();
        assert_eq!((c.backend(), c.pool_size), (Backend::Memory, Some(3)));
        let shown = format!("{:?}", StoreConfig::default().with_env_from(env_with_url));
        assert!(
            shown.contains("app:***@db") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn postgres_without_a_url_is_a_clear_error() {
        let c = StoreConfig {
            backend: Some(Backend::Postgres),
            ..Default::default()
        };
        let e = open(&c).await.err().unwrap().to_string();
        assert!(e.contains("DATABASE_URL"), "{e}");
        assert_eq!(
            open(&StoreConfig {
                backend: Some(Backend::Memory),
                ..Default::default()
            })
            .await
            .unwrap()
            .backend(),
            "memory"
        );
    }
}
