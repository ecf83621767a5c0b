//! One task per MCP server: start or connect, list the tools into the
//! registry, watch the connection, refresh, and reconnect with backoff.
//!
//! The task owns the connection; tools only borrow its [`Peer`] through
//! [`Shared`], which the task clears the moment the connection is lost — so
//! a call on a dead server fails at once instead of waiting for its time
//! limit. A lost connection is seen three ways: the client's service loop
//! ends (a stdio child exited), a `ping` or tool listing fails (health
//! check, refresh), or a call fails for lack of a connection (the call
//! wakes the task to check now).
//! Whatever happens, the partition is emptied rather than the process
//! stopped, and the task tries again after a delay that doubles per
//! failure up to `max_backoff`.

use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{ClientRequest, PingRequest};
use rmcp::service::{QuitReason, RunningServiceCancellationToken};
use rmcp::{ClientCacheConfig, Peer, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::config::{McpServerConfig, McpTransport};
use super::connect::{Handler, connect};
use super::remote::{McpTool, describe};
use super::status::{ServerState, ServerStatus};
use crate::tools::{Tool, ToolError, ToolRegistry, ToolSpec};

/// How long a closing connection may take before it is abandoned (a stdio
/// child is killed when its handle drops anyway).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Lines of a child's stderr kept for error messages.
const STDERR_TAIL: usize = 5;

/// What the supervisor task and the tools of one server share.
pub(crate) struct Shared {
    pub(super) cfg: McpServerConfig,
    name: String,
    status: Mutex<ServerStatus>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    /// Check the connection and list the tools now (the server said its
    /// tools changed, a call lost its connection, or someone asked).
    wake: Notify,
    stderr: Mutex<VecDeque<String>>,
}

impl Shared {
    pub(super) fn new(name: &str, cfg: McpServerConfig) -> Self {
        let status = ServerStatus {
            name: name.to_owned(),
            transport: cfg.transport.kind(),
            partition: cfg.partition.clone(),
            state: ServerState::Connecting,
            tools: 0,
            last_error: None,
            last_refresh: None,
            pid: None,
            server_info: None,
            connects: 0,
        };
        Self {
            cfg,
            name: name.to_owned(),
            status: Mutex::new(status),
            peer: RwLock::new(None),
            wake: Notify::new(),
            stderr: Mutex::new(VecDeque::new()),
        }
    }

    /// The server's name in the config.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The live connection, if there is one.
    pub(super) fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_peer(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(PoisonError::into_inner) = peer;
    }

    /// The failure of a call while the server is not connected.
    pub(super) fn unavailable(&self) -> ToolError {
        let s = self.status();
        let why = match (s.state, s.last_error) {
            (ServerState::Connecting, _) => "is starting".to_owned(),
            (_, Some(e)) => format!("is down ({e})"),
            (_, None) => "is down".to_owned(),
        };
        ToolError::Execution(format!(
            "MCP server `{}` {why}; it is retried automatically, try again later",
            self.name
        ))
    }

    /// A call lost its connection: check now.
    pub(super) fn suspect(&self) {
        self.wake.notify_one();
    }

    /// List the tools now.
    pub(super) fn refresh_now(&self) {
        self.wake.notify_one();
    }

    /// A copy of the status.
    pub(super) fn status(&self) -> ServerStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut ServerStatus)) {
        f(&mut self.status.lock().unwrap_or_else(PoisonError::into_inner));
    }

    pub(super) fn clear_stderr(&self) {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Keeps one line of the child's stderr (the last few are kept).
    pub(super) fn push_stderr(&self, line: &str) {
        let mut tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(line.chars().take(500).collect());
    }

    /// `; stderr: …` with the child's last lines, or nothing.
    pub(super) fn stderr_hint(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; stderr: {}",
                tail.iter().cloned().collect::<Vec<_>>().join(" | ")
            )
        }
    }

    /// Marks the server down and empties its partition.
    fn go_down(&self, registry: &ToolRegistry, reason: String) {
        self.set_peer(None);
        if let Err(e) = registry.set_partition(&self.cfg.partition, Vec::new()) {
            tracing::error!(server = %self.name, error = %e, "cannot empty the partition of an MCP server");
        }
        let mut repeated = false;
        self.update(|s| {
            repeated =
                s.state == ServerState::Down && s.last_error.as_deref() == Some(reason.as_str());
            s.state = ServerState::Down;
            s.tools = 0;
            s.pid = None;
            s.last_error = Some(reason.clone());
        });
        if repeated {
            tracing::debug!(server = %self.name, partition = %self.cfg.partition, reason = %reason, "MCP server still down");
        } else {
            tracing::warn!(server = %self.name, partition = %self.cfg.partition, reason = %reason, "MCP server down; retrying with backoff");
        }
    }
}

/// Why a connection ended.
enum End {
    /// Shutdown was asked for.
    Stopped,
    /// It failed or was lost; `up` is how long it was ready.
    Lost { reason: String, up: Duration },
}

/// Runs [`supervise`] and starts it again should it panic: a bug here or
/// in rmcp must not end a server's supervision for good.
pub(super) async fn run(shared: Arc<Shared>, registry: Arc<ToolRegistry>, stop: CancellationToken) {
    loop {
        let task = tokio::spawn(supervise(
            Arc::clone(&shared),
            Arc::clone(&registry),
            stop.clone(),
        ));
        match task.await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(server = %shared.name, error = %e, "MCP supervisor failed; restarting it");
                shared.go_down(&registry, format!("internal error: {e}"));
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(shared.cfg.backoff) => {}
        }
    }
}

/// Runs one server until `stop` is cancelled.
async fn supervise(shared: Arc<Shared>, registry: Arc<ToolRegistry>, stop: CancellationToken) {
    let cfg = &shared.cfg;
    let mut delay = cfg.backoff;
    loop {
        shared.update(|s| s.state = ServerState::Connecting);
        match session(&shared, &registry, &stop).await {
            End::Stopped => break,
            End::Lost { reason, up } => {
                shared.go_down(&registry, reason);
                if up >= cfg.max_backoff {
                    delay = cfg.backoff;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(cfg.max_backoff);
    }
    shared.set_peer(None);
    if let Err(e) = registry.set_partition(&cfg.partition, Vec::new()) {
        tracing::error!(server = %shared.name, error = %e, "cannot empty the partition of an MCP server");
    }
    shared.update(|s| {
        s.state = ServerState::Down;
        s.tools = 0;
        s.pid = None;
        s.last_error = Some("shut down".into());
    });
    tracing::info!(server = %shared.name, "MCP server shut down");
}

/// One connection, from start to loss.
async fn session(shared: &Arc<Shared>, registry: &ToolRegistry, stop: &CancellationToken) -> End {
    let cfg = &shared.cfg;
    let lost = |reason: String| End::Lost {
        reason,
        up: Duration::ZERO,
    };
    let handler = Handler::new(Arc::clone(shared));
    let client = tokio::select! {
        () = stop.cancelled() => return End::Stopped,
        r = tokio::time::timeout(cfg.connect_timeout, connect(shared, handler)) => match r {
            Ok(Ok(client)) => client,
            Ok(Err(reason)) => return lost(reason),
            Err(_) => return lost(format!("no MCP handshake within {:?}{}", cfg.connect_timeout, shared.stderr_hint())),
        },
    };
    let peer = client.peer().clone();
    // Listings must come from the server, not from rmcp's response cache
    // (which would also serve stale lists while the server is down).
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let info = client.peer_info().and_then(|i| {
        i.server_info
            .as_ref()
            .map(|s| format!("{} {}", s.name, s.version).trim().to_owned())
    });
    let cancel = client.cancellation_token();
    let mut closed = std::pin::pin!(client.waiting());
    let mut listed = None;

    let first = tokio::select! {
        () = stop.cancelled() => None,
        q = &mut closed => return lost(closed_reason(shared, &q)),
        r = tokio::time::timeout(cfg.connect_timeout, peer.list_all_tools()) => Some(r),
    };
    let failure = match first {
        None => {
            cancel.cancel();
            let _ = tokio::time::timeout(CLOSE_GRACE, closed).await;
            return End::Stopped;
        }
        Some(Ok(Ok(tools))) => {
            publish(shared, registry, &tools, &mut listed);
            None
        }
        Some(Ok(Err(e))) => Some(format!("listing tools failed: {}", describe(&e))),
        Some(Err(_)) => Some(format!(
            "no answer to tools/list within {:?}",
            cfg.connect_timeout
        )),
    };
    if let Some(reason) = failure {
        cancel.cancel();
        let _ = tokio::time::timeout(CLOSE_GRACE, closed).await;
        return lost(reason);
    }
    shared.set_peer(Some(peer.clone()));
    shared.update(|s| {
        s.state = ServerState::Ready;
        s.connects += 1;
        s.server_info = info;
    });
    tracing::info!(server = %shared.name, partition = %cfg.partition, tools = shared.status().tools, "MCP server ready");
    watch(shared, registry, stop, &peer, cancel, closed, listed).await
}

/// A ready connection, watched until it is lost or shutdown is asked for:
/// health checks, refreshes of the tool list, and the end of the client's
/// service loop (`closed`).
async fn watch<F>(
    shared: &Arc<Shared>,
    registry: &ToolRegistry,
    stop: &CancellationToken,
    peer: &Peer<RoleClient>,
    cancel: RunningServiceCancellationToken,
    mut closed: Pin<&mut F>,
    mut listed: Option<String>,
) -> End
where
    F: Future<Output = Result<QuitReason, tokio::task::JoinError>>,
{
    let cfg = &shared.cfg;
    let ready = Instant::now();
    let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let mut next_refresh = tokio::time::Instant::now() + cfg.refresh;
    let mut next_ping = cfg
        .health_check
        .map_or_else(far, |h| tokio::time::Instant::now() + h);
    let reason = loop {
        let ping = tokio::select! {
            // An ended connection wins over a pending refresh, so its reason
            // (a process exit, with stderr) is the one reported.
            biased;
            () = stop.cancelled() => {
                shared.set_peer(None);
                cancel.cancel();
                let _ = tokio::time::timeout(CLOSE_GRACE, closed).await;
                return End::Stopped;
            }
            q = &mut closed => {
                // The service loop has ended: nothing left to close.
                shared.set_peer(None);
                return End::Lost { reason: closed_reason(shared, &q), up: ready.elapsed() };
            }
            () = tokio::time::sleep_until(next_refresh) => false,
            () = shared.wake.notified() => false,
            () = tokio::time::sleep_until(next_ping) => true,
        };
        let now = tokio::time::Instant::now();
        next_ping = cfg.health_check.map_or_else(far, |h| now + h);
        if ping {
            let request = ClientRequest::PingRequest(PingRequest::default());
            match tokio::time::timeout(cfg.timeout, peer.send_request(request)).await {
                // Any answer, even an error, means the server is there.
                Ok(Ok(_) | Err(ServiceError::McpError(_))) => continue,
                Ok(Err(e)) => break format!("ping failed: {}", describe(&e)),
                Err(_) => break format!("no answer to ping within {:?}", cfg.timeout),
            }
        }
        next_refresh = now + cfg.refresh;
        match tokio::time::timeout(cfg.timeout, peer.list_all_tools()).await {
            Ok(Ok(tools)) => publish(shared, registry, &tools, &mut listed),
            // The server answered: it is alive, only the listing failed.
            Ok(Err(ServiceError::McpError(e))) => {
                tracing::warn!(server = %shared.name, error = %e.message, "MCP tool listing failed; keeping the previous tools");
                shared.update(|s| {
                    s.last_error = Some(format!("listing tools failed: {}", e.message))
                });
            }
            Ok(Err(e)) => break format!("listing tools failed: {}", describe(&e)),
            Err(_) => break format!("no answer to tools/list within {:?}", cfg.timeout),
        }
    };
    shared.set_peer(None);
    // A request failing because the connection ended: report why it ended.
    if let Ok(q) = tokio::time::timeout(Duration::from_millis(200), &mut closed).await {
        return End::Lost {
            reason: closed_reason(shared, &q),
            up: ready.elapsed(),
        };
    }
    cancel.cancel();
    let _ = tokio::time::timeout(CLOSE_GRACE, closed).await;
    End::Lost {
        reason,
        up: ready.elapsed(),
    }
}

fn closed_reason(shared: &Shared, quit: &Result<QuitReason, tokio::task::JoinError>) -> String {
    let what = match shared.cfg.transport {
        McpTransport::Stdio { .. } => "the server process exited or closed its output",
        McpTransport::Http { .. } => "the connection closed",
    };
    match quit {
        Ok(QuitReason::Closed | QuitReason::Cancelled) => format!("{what}{}", shared.stderr_hint()),
        Ok(other) => format!("{what} ({other:?}){}", shared.stderr_hint()),
        Err(e) => format!("{what} ({e}){}", shared.stderr_hint()),
    }
}

/// Registers the listed tools as the server's partition, unless the list
/// is the same as last time.
fn publish(
    shared: &Arc<Shared>,
    registry: &ToolRegistry,
    tools: &[rmcp::model::Tool],
    listed: &mut Option<String>,
) {
    let cfg = &shared.cfg;
    let now = crate::tools::builtin::rfc3339(crate::events::now_micros() / 1_000_000);
    shared.update(|s| s.last_refresh = Some(now));
    let fingerprint = serde_json::to_string(tools).unwrap_or_default();
    if listed.as_ref() == Some(&fingerprint) {
        return;
    }
    let mut out: Vec<Arc<dyn Tool>> = Vec::new();
    let mut names = BTreeSet::new();
    let mut problems = Vec::new();
    for t in tools {
        let name = local_name(&cfg.prefix, &t.name);
        let schema = Value::Object((*t.input_schema).clone());
        if let Err(e) = jsonschema::validator_for(&schema) {
            problems.push(format!(
                "tool `{}` skipped: invalid input schema ({e})",
                t.name
            ));
            continue;
        }
        if registry
            .spec(&name)
            .is_some_and(|s| s.partition != cfg.partition)
            || !names.insert(name.clone())
        {
            problems.push(format!(
                "tool `{}` skipped: the name `{name}` is taken (set `prefix` for this server)",
                t.name
            ));
            continue;
        }
        let description = t
            .description
            .as_deref()
            .or(t.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        let spec = ToolSpec {
            name,
            description,
            input_schema: Arc::new(schema),
            output_schema: t
                .output_schema
                .as_ref()
                .map(|s| Arc::new(Value::Object((**s).clone()))),
            partition: cfg.partition.clone(),
            policy: cfg.policy_for(&t.name),
        };
        out.push(Arc::new(McpTool {
            spec,
            remote: t.name.to_string(),
            server: Arc::clone(shared),
        }));
    }
    let count = out.len();
    if let Err(e) = registry.set_partition(&cfg.partition, out) {
        problems.push(format!("tools not registered: {e}"));
    } else {
        *listed = Some(fingerprint);
        shared.update(|s| s.tools = count);
        tracing::debug!(server = %shared.name, tools = count, "MCP tools registered");
    }
    if !problems.is_empty() {
        let message = problems.join("; ");
        tracing::warn!(server = %shared.name, problems = %message, "some MCP tools were not registered");
        shared.update(|s| s.last_error = Some(message));
    }
}

/// `prefix + name`, with characters models reject in tool names replaced by `_`.
fn local_name(prefix: &str, remote: &str) -> String {
    format!("{prefix}{remote}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_names_are_prefixed_and_safe_for_models() {
        assert_eq!(local_name("everything__", "get-sum"), "everything__get-sum");
        assert_eq!(local_name("", "files.read/all"), "files_read_all");
    }
}
