//! Everything the crate logs and records, captured for the leak tests: a TRACE subscriber
//! writing every event and span to memory, and a recording metrics recorder.

use std::sync::{Arc, Mutex};

/// Everything logged, as text: the writer [`capture_everything`] installs.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, for the whole test binary, a TRACE subscriber writing every event and span (with
/// its fields) to the returned capture, and a recording metrics recorder.
pub fn capture_everything() -> (Captured, metrics_util::debugging::Snapshotter) {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    (logs, snapshotter)
}
