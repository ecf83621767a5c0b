//! `stategraph serve`.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::anyhow;

use super::setup::runtime;
use crate::config::Config;
use crate::nodes::Registries;
use crate::server;

/// Serves the chat API until Ctrl-C or SIGTERM, then drains.
pub(super) fn serve(
    mut config: Config,
    registries: Registries,
    bind: Option<SocketAddr>,
) -> anyhow::Result<ExitCode> {
    if let Some(b) = bind {
        config.server.bind = b;
    }
    let _telemetry =
        crate::telemetry::init(&config.telemetry).map_err(|e| anyhow!("telemetry: {e}"))?;
    runtime()?.block_on(async move {
        let bind = config.server.bind;
        let state = server::build_state(config, registries)
            .await
            .map_err(anyhow::Error::msg)?;
        let listener = listen(bind).map_err(|e| anyhow!("cannot listen on {bind}: {e}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "listening");
        greet(addr);
        server::serve(state, listener, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// What a newcomer needs to talk to the server.
fn greet(addr: SocketAddr) {
    println!("stategraph is serving on http://{addr}");
    println!("  studio: http://{addr}/studio");
    println!("  point a useChat front end (DefaultChatTransport) at http://{addr}/api/chat");
    println!("  try it: curl -N http://{addr}/api/chat -H 'content-type: application/json' \\");
    println!(
        "            -d '{{\"id\":\"demo\",\"messages\":[{{\"id\":\"m1\",\"role\":\"user\",\"parts\":[{{\"type\":\"text\",\"text\":\"hello\"}}]}}]}}'"
    );
}

/// A listener with a deep accept backlog: many clients connect at once.
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
