//! What the paired benchmarks share: the iteration count, percentiles of sorted samples
//! and unit conversions.

use std::time::Duration;

/// The `p` quantile (0..=1) of `sorted`, nearest rank.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// `d` in milliseconds.
#[allow(dead_code)] // not every bench prints milliseconds
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The p50 and p90 of `sorted`, in milliseconds.
#[allow(dead_code)] // not every bench prints milliseconds
pub fn p50_p90_ms(sorted: &[Duration]) -> (f64, f64) {
    (ms(percentile(sorted, 0.5)), ms(percentile(sorted, 0.9)))
}

/// The first numeric command-line argument (`cargo bench … -- N`), else `default`.
pub fn iterations(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}
