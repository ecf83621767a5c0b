//! How a server is reached: a child process on stdio or a streamable-HTTP
//! endpoint, and the client side of the handshake.
//!
//! A stdio child's stderr is piped rather than inherited: its lines go to
//! the log at `debug` under the server's name, and the last few are kept so
//! that "the process exited" can say what the process said before dying.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;

use super::config::McpTransport;
use super::remote::describe_init;
use super::supervisor::Shared;

/// Starts the child process or opens the HTTP connection, and shakes hands.
pub(super) async fn connect(
    shared: &Arc<Shared>,
    handler: Handler,
) -> Result<RunningService<RoleClient, Handler>, String> {
    match &shared.cfg.transport {
        McpTransport::Stdio { command, env, cwd } => {
            let Some((program, args)) = command.split_first() else {
                return Err("empty command".into());
            };
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args).envs(env).kill_on_drop(true);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            shared.clear_stderr();
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{program}`: {e}"))?;
            let pid = transport.id();
            shared.update(|s| s.pid = pid);
            if let Some(stderr) = stderr {
                tokio::spawn(forward_stderr(Arc::clone(shared), stderr));
            }
            handler.serve(transport).await.map_err(|e| {
                format!(
                    "MCP handshake failed: {}{}",
                    describe_init(&e),
                    shared.stderr_hint()
                )
            })
        }
        McpTransport::Http { url, headers } => {
            let mut map = HashMap::new();
            for (k, v) in headers {
                let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| format!("header `{k}`: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(v)
                    .map_err(|e| format!("header `{k}`: {e}"))?;
                map.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
            let transport = StreamableHttpClientTransport::from_config(config);
            handler
                .serve(transport)
                .await
                .map_err(|e| format!("cannot connect to {url}: {}", describe_init(&e)))
        }
    }
}

/// Sends a child's stderr to the log and keeps its last lines for errors.
async fn forward_stderr(shared: Arc<Shared>, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %shared.name(), "{line}");
        shared.push_stderr(&line);
    }
}

/// The client side of the connection: it names the runtime and listens for
/// `notifications/tools/list_changed`.
pub(super) struct Handler {
    shared: Arc<Shared>,
}

impl Handler {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        self.shared.refresh_now();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("stategraph", env!("CARGO_PKG_VERSION")),
        )
    }
}
