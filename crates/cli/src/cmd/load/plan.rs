//! What every row of a run resolves: one request stream, drawn once, over one token set.

/// The request stream shared by every row, and the tokens it names.
pub(super) struct Plan {
    /// Per resolution: an index into `tokens`, or [`NEW`].
    pub(super) stream: Vec<u32>,
    /// The Zipf-drawn token set, most popular first.
    pub(super) tokens: Vec<String>,
    /// Tokens for new-token resolutions, used in order.
    pub(super) pool: Vec<String>,
}

/// Marks a new-token resolution in [`Plan::stream`].
pub(super) const NEW: u32 = u32::MAX;

/// Resolutions a task takes from the stream at once, so the tasks do not contend on its cursor.
pub(super) const CHUNK: usize = 64;

/// `len` draws: a Zipf(s) rank over `n` (0-based), or [`NEW`] with probability `new_share`.
pub(super) fn stream(len: usize, n: usize, s: f64, new_share: f64) -> Vec<u32> {
    let mut total = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            total += (k as f64).powf(-s);
            total
        })
        .collect();
    cdf.iter_mut().for_each(|c| *c /= total);
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    (0..len)
        .map(|_| {
            if rng.f64() < new_share {
                NEW
            } else {
                let u = rng.f64();
                cdf.partition_point(|&c| c < u).min(n - 1) as u32
            }
        })
        .collect()
}
