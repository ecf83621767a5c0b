//! PostgreSQL for benches: a throwaway database, a proxy that counts round
//! trips on the wire, and the CPU time of processes (this one and the
//! server's backends) from `/proc`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The server every bench uses: local, trust authentication.
pub const PG: &str = "postgres://postgres@127.0.0.1:5432";

/// A connection to the `postgres` database, or `None` if the server is not there.
pub async fn admin() -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(&format!("{PG}/postgres"), tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// A database created for one bench run and dropped (with its connections)
/// when this is dropped, panics included.
pub struct TempDb {
    /// Database name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl TempDb {
    /// Creates `stategraph_bench_<tag>_<random>`; `None` without a server.
    pub async fn create(tag: &str) -> Option<Self> {
        let admin = admin().await?;
        let name = format!("stategraph_bench_{tag}_{}", uuid::Uuid::new_v4().simple());
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .ok()?;
        Some(Self {
            url: format!("{PG}/{name}"),
            name,
        })
    }

    /// A plain connection to the database (for statistics queries).
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect to the bench database");
        tokio::spawn(conn);
        client
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        // A runtime of its own on a thread of its own: this may run inside
        // another runtime (or during a panic).
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Some(admin) = admin().await {
                    let _ = admin
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// Client messages that wait for the server, counted by [`counting_proxy`]
/// by statement: every `Sync` (extended protocol) or simple `Query` waits
/// for the server's `ReadyForQuery`, so each is one round trip.
#[derive(Default)]
pub struct WireCount {
    /// Round trips by SQL text (`prepare: ` + text for a `Parse` that was
    /// not followed by a `Bind` before its `Sync`).
    by_sql: Mutex<HashMap<String, u64>>,
}

impl WireCount {
    /// Round trips so far.
    pub fn round_trips(&self) -> u64 {
        self.snapshot().values().sum()
    }

    /// Round trips so far, by SQL text.
    pub fn snapshot(&self) -> HashMap<String, u64> {
        self.by_sql
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Round trips since `before` whose SQL contains `needle`.
    pub fn since(&self, before: &HashMap<String, u64>, needle: &str) -> u64 {
        self.snapshot()
            .iter()
            .filter(|(sql, _)| sql.contains(needle))
            .map(|(sql, n)| n - before.get(sql).copied().unwrap_or(0))
            .sum()
    }

    fn count(&self, sql: String) {
        *self
            .by_sql
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(sql)
            .or_default() += 1;
    }
}

/// What one connection's parser remembers.
#[derive(Default)]
struct Conn {
    startup: bool,
    /// Prepared statements by name.
    statements: HashMap<String, String>,
    /// What the next `Sync` completes.
    pending: Option<String>,
}

/// A TCP proxy to 127.0.0.1:5432 that parses the client's protocol messages
/// and counts round trips by statement; returns its port. It runs in this
/// process, so measure CPU without it.
pub async fn counting_proxy(count: Arc<WireCount>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect("127.0.0.1:5432").await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                let mut conn = Conn {
                    startup: true,
                    ..Conn::default()
                };
                loop {
                    let n = match cr.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if sw.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    parse_messages(&mut buf, &mut conn, &count);
                }
            });
        }
    });
    port
}

/// The null-terminated strings at the start of `body`.
fn cstrs(body: &[u8], n: usize) -> Vec<String> {
    body.split(|b| *b == 0)
        .take(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Consumes the complete messages at the front of `buf`.
fn parse_messages(buf: &mut Vec<u8>, conn: &mut Conn, count: &WireCount) {
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        if conn.startup {
            // Untyped: length (with itself), then a protocol code.
            if rest.len() < 8 {
                break;
            }
            let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if rest.len() < len {
                break;
            }
            let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
            // SSL and GSS encryption requests precede the real startup.
            conn.startup = code == 80_877_103 || code == 80_877_104;
            at += len;
            continue;
        }
        if rest.len() < 5 {
            break;
        }
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if rest.len() < 1 + len {
            break;
        }
        let body = &rest[5..1 + len];
        match rest[0] {
            b'P' => {
                let s = cstrs(body, 2);
                let (name, sql) = (s[0].clone(), s.get(1).cloned().unwrap_or_default());
                conn.pending = Some(format!("prepare: {sql}"));
                conn.statements.insert(name, sql);
            }
            b'B' => {
                let s = cstrs(body, 2);
                let sql = s.get(1).and_then(|name| conn.statements.get(name));
                conn.pending = Some(sql.cloned().unwrap_or_else(|| "?".into()));
            }
            b'S' => count.count(conn.pending.take().unwrap_or_else(|| "sync".into())),
            b'Q' => count.count(cstrs(body, 1).remove(0)),
            _ => {}
        }
        at += 1 + len;
    }
    buf.drain(..at);
}

/// User + system CPU time of a process (all its threads, exited ones
/// included) from `/proc/<pid>/stat`, in clock ticks of 10 ms (Linux's
/// `USER_HZ`). `pid` may be `"self"`.
pub fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields resume after its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14 and 15 of the man page (utime, stime); the slice starts at field 3.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// CPU time of the live threads of process `pid` (may be `"self"`) whose
/// name starts with `name` (e.g. `sqlite-writer`), from each thread's
/// `schedstat` (nanoseconds, unlike the 10 ms ticks of `stat`).
pub fn threads_cpu(pid: &str, name: &str) -> Option<Duration> {
    schedstat(pid, name, 0)
}

/// Time the same threads spent runnable but waiting for a CPU (the second
/// field of `schedstat`): contention for the machine's cores, not locks.
pub fn threads_waited(pid: &str, name: &str) -> Option<Duration> {
    schedstat(pid, name, 1)
}

fn schedstat(pid: &str, name: &str, field: usize) -> Option<Duration> {
    let mut ns = 0u64;
    let mut found = false;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !comm.starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        if let Some(v) = stat
            .split_whitespace()
            .nth(field)
            .and_then(|v| v.parse::<u64>().ok())
        {
            ns += v;
            found = true;
        }
    }
    found.then(|| Duration::from_nanos(ns))
}

/// The backends serving `db` (its client connections), by process id.
pub async fn backends(client: &tokio_postgres::Client, db: &str) -> Vec<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .await
        .expect("pg_stat_activity")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Total CPU time of these processes (those that exited count zero).
pub fn cpu_of(pids: &[i32]) -> Duration {
    pids.iter().filter_map(|p| cpu_time(&p.to_string())).sum()
}

/// Every process named `postgres` (backends, WAL writer, checkpointer, …).
pub fn postgres_processes() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .collect()
}

/// The server's WAL position, in bytes.
pub async fn wal_lsn(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
            &[],
        )
        .await
        .expect("wal position")
        .get(0)
}
