//! A TCP server on `127.0.0.1:0` that accepts connections and never says anything: a TLS
//! handshake with it hangs until the client gives up. Stops when dropped.

use std::net::SocketAddr;

/// The listening task; aborted on drop (the held connections go with it).
pub struct SilentTcp {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SilentTcp {
    pub async fn start() -> SilentTcp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        SilentTcp { addr, task }
    }
}

impl Drop for SilentTcp {
    fn drop(&mut self) {
        self.task.abort();
    }
}
