//! Any axum router served on `127.0.0.1:0`, for tests of the axum integration: the app under
//! test, reached with a real HTTP client. Stopped on drop.

use std::net::SocketAddr;

use axum::Router;

/// A router serving on loopback; the server task ends when this is dropped.
pub struct ServedApp {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl ServedApp {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for ServedApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `router` on `127.0.0.1:0`.
pub async fn serve_app(router: Router) -> ServedApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    ServedApp { addr, task }
}
