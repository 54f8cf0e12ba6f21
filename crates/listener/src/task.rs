//! [`ServerTask`]: a server running in a tokio task until it is told to stop, with a bounded
//! graceful shutdown. The companion servers (the game server, the reference API) are built on
//! it; how each one stops accepting and finishes its connections is its own business.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A serving task and the means to stop it. Dropping it aborts the task at once;
/// [`shutdown`](Self::shutdown) asks it to finish first.
#[derive(Debug)]
pub struct ServerTask {
    /// Sends the stop signal; every [`Stopped`] sees it.
    stop: watch::Sender<()>,
    /// The task; `None` once shut down.
    task: Option<JoinHandle<()>>,
}

/// The stop signal as the serving task and its helpers see it; cheap to clone.
#[derive(Debug, Clone)]
pub struct Stopped(watch::Receiver<()>);

impl Stopped {
    /// Returns once the server is told to stop (or its [`ServerTask`] is gone).
    pub async fn wait(&mut self) {
        let _ = self.0.changed().await;
    }
}

impl ServerTask {
    /// Spawns `serve`, which gets the stop signal and should return soon after it fires.
    pub fn spawn<F, Fut>(serve: F) -> ServerTask
    where
        F: FnOnce(Stopped) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(());
        let task = tokio::spawn(serve(Stopped(stopped)));
        ServerTask {
            stop,
            task: Some(task),
        }
    }

    /// Tells the task to stop and waits for it for at most `grace`, after which it is aborted.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop.send(());
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl Drop for ServerTask {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// How long an accept loop waits after a failed accept.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The next connection on `listener`. A failed accept (out of file descriptors and the like)
/// is logged and tried again after a pause, so that an accept loop does not spin.
pub async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn shutdown_lets_the_task_finish_after_the_signal() {
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        let task = ServerTask::spawn(|mut stopped| async move {
            stopped.wait().await;
            f.store(true, Ordering::SeqCst);
        });
        task.shutdown(Duration::from_secs(5)).await;
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_task_that_ignores_the_signal_is_aborted_after_the_grace() {
        let task = ServerTask::spawn(|_| std::future::pending::<()>());
        let started = tokio::time::Instant::now();
        task.shutdown(Duration::from_millis(50)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
