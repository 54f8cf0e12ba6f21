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

/// What a leak test searches in an error: its message, its `Debug`, and both for every error
/// down its source chain.
pub fn error_texts(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |e| e.source())
        .flat_map(|e| [e.to_string(), format!("{e:?}")])
        .collect()
}

/// Every metric the recorder saw, as its name and its labels: what a leak test searches, and
/// what a test that counts outcomes reads.
pub fn recorded_metrics(
    snapshotter: &metrics_util::debugging::Snapshotter,
) -> Vec<(String, Vec<(String, String)>)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, ..)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels)
        })
        .collect()
}
