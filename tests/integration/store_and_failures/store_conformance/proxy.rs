//! A TCP proxy in front of the shared PostgreSQL server, so a test can take
//! "the database" away without disturbing the other tests using the server:
//! `cut` drops every connection and refuses new ones, `restore` accepts
//! again on the same port, and `lose_reply_to` lets one request through and
//! cuts before its reply comes back (an append that commits while its
//! client only sees the connection drop).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

const UPSTREAM: &str = "127.0.0.1:5432";

#[derive(Clone)]
pub(super) struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    /// The accept loop. It owns the connections' tasks, so aborting it
    /// closes the listener and every connection.
    accept: Mutex<Option<JoinHandle<()>>>,
    /// Replies from the server are dropped while set.
    blackhole: AtomicBool,
    /// The request containing these bytes gets through, its reply does not.
    trigger: Mutex<Option<Vec<u8>>>,
    /// How long the proxy stays down after losing a reply, in ms.
    down_ms: AtomicU64,
    replies_lost: AtomicUsize,
}

impl Proxy {
    pub(super) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let inner = Arc::new(Inner {
            addr: listener.local_addr().unwrap(),
            accept: Mutex::new(None),
            blackhole: AtomicBool::new(false),
            trigger: Mutex::new(None),
            down_ms: AtomicU64::new(0),
            replies_lost: AtomicUsize::new(0),
        });
        let task = spawn_accept(listener, Arc::clone(&inner));
        *inner.accept.lock().unwrap() = Some(task);
        Self { inner }
    }

    /// The same URL through the proxy.
    pub(super) fn url(&self, url: &str) -> String {
        assert!(url.contains("127.0.0.1:5432"), "{url}");
        url.replace("127.0.0.1:5432", &self.inner.addr.to_string())
    }

    /// Drops every connection and refuses new ones.
    pub(super) async fn cut(&self) {
        self.inner.cut().await;
    }

    /// Accepts again, on the same port.
    pub(super) async fn restore(&self) {
        Arc::clone(&self.inner).restore().await;
    }

    /// The next request containing `marker` reaches the server but its reply
    /// is dropped; 300 ms later (time for the server to commit) every
    /// connection is cut, and after `down_for` the proxy accepts again.
    pub(super) fn lose_reply_to(&self, marker: &str, down_for: Duration) {
        self.inner
            .down_ms
            .store(down_for.as_millis() as u64, Ordering::SeqCst);
        *self.inner.trigger.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }

    /// Requests whose reply was dropped so far.
    pub(super) fn replies_lost(&self) -> usize {
        self.inner.replies_lost.load(Ordering::SeqCst)
    }
}

impl Inner {
    async fn cut(&self) {
        let task = self.accept.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    async fn restore(self: Arc<Self>) {
        self.cut().await;
        self.blackhole.store(false, Ordering::SeqCst);
        // The port was just ours: SO_REUSEADDR lets it be bound again while
        // the cut connections linger in TIME_WAIT.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(self.addr).unwrap();
        let listener = socket.listen(128).unwrap();
        let task = spawn_accept(listener, Arc::clone(&self));
        *self.accept.lock().unwrap() = Some(task);
    }
}

/// Boxed: the accept loop leads (through a lost reply) back to `restore`,
/// which starts an accept loop, and a recursive `async fn` needs a box.
fn spawn_accept(listener: TcpListener, inner: Arc<Inner>) -> JoinHandle<()> {
    let task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
        Box::pin(accept(listener, inner));
    tokio::spawn(task)
}

async fn accept(listener: TcpListener, inner: Arc<Inner>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(pipe(client, Arc::clone(&inner)));
                }
                Err(_) => return,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn pipe(client: TcpStream, inner: Arc<Inner>) {
    let Ok(server) = TcpStream::connect(UPSTREAM).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let ((client_r, client_w), (server_r, server_w)) = (client.into_split(), server.into_split());
    tokio::select! {
        () = upstream(client_r, server_w, &inner) => {}
        () = downstream(server_r, client_w, &inner) => {}
    }
}

/// Client to server, watching for the trigger.
async fn upstream(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, inner: &Arc<Inner>) {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let fire = {
            let mut trigger = inner.trigger.lock().unwrap();
            let hit = trigger
                .as_deref()
                .is_some_and(|m| chunk.windows(m.len()).any(|w| w == m));
            if hit {
                *trigger = None;
            }
            hit
        };
        if fire {
            inner.blackhole.store(true, Ordering::SeqCst);
            inner.replies_lost.fetch_add(1, Ordering::SeqCst);
            let inner = Arc::clone(inner);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                inner.cut().await;
                tokio::time::sleep(Duration::from_millis(inner.down_ms.load(Ordering::SeqCst)))
                    .await;
                inner.restore().await;
            });
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// Server to client, unless replies are being lost.
async fn downstream(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, inner: &Inner) {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if inner.blackhole.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
