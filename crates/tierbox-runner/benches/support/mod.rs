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

/// Rounds of a configuration measured off, on and off again, in an order that rotates
/// per round: the second off run against the first is the noise floor (the same
/// configuration measured twice).
#[allow(dead_code)] // only the benches that compare a switch use it
pub struct SwitchRounds {
    /// The first off run of each round, sorted.
    pub off: Vec<Duration>,
    /// The on run of each round, sorted.
    pub on: Vec<Duration>,
    /// on / off per round, sorted.
    pub ratios: Vec<f64>,
    /// off again / off per round, sorted.
    pub floor: Vec<f64>,
}

#[allow(dead_code)] // only the benches that compare a switch use it
impl SwitchRounds {
    /// `rounds` rounds of `run(false)`, `run(true)`, `run(false)` in rotating order;
    /// `before` runs (untimed) before each.
    pub fn measure(
        rounds: usize,
        mut run: impl FnMut(bool) -> Duration,
        mut before: impl FnMut(),
    ) -> Self {
        let mut r = Self {
            off: Vec::new(),
            on: Vec::new(),
            ratios: Vec::new(),
            floor: Vec::new(),
        };
        for i in 0..rounds {
            let mut times = [Duration::ZERO; 3];
            for k in 0..3 {
                let which = (i + k) % 3;
                before();
                times[which] = run(which == 1);
            }
            let [a, b, again] = times;
            r.ratios.push(b.as_secs_f64() / a.as_secs_f64());
            r.floor.push(again.as_secs_f64() / a.as_secs_f64());
            r.off.push(a);
            r.on.push(b);
        }
        r.off.sort();
        r.on.sort();
        r.ratios.sort_by(f64::total_cmp);
        r.floor.sort_by(f64::total_cmp);
        r
    }

    /// `on / off: median of rounds R (noise floor, off / off: F, p10-p90 A-B)`.
    pub fn ratio_line(&self) -> String {
        let (f, n) = (&self.floor, self.floor.len());
        format!(
            "median of rounds {:.2}   (noise floor, off / off: {:.2}, p10-p90 {:.2}-{:.2})",
            self.ratios[self.ratios.len() / 2],
            f[n / 2],
            f[n / 10],
            f[n * 9 / 10]
        )
    }
}
