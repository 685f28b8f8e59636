//! Redaction throughput on 8 MiB of realistic mixed output.
//!
//! `cargo run --release -p tierbox-redact --example redact_throughput`
//!
//! Builds two texts from the test corpora: one made only of ordinary developer output
//! (`tests/redaction/negatives.txt`, nothing to redact — the common case) and one where
//! about one line in twenty carries a secret (`positives.txt`), then reports MB/s for each.

use std::time::Instant;

use tierbox_redact::Redactor;

const NEGATIVES: &str = include_str!("../tests/redaction/negatives.txt");
const POSITIVES: &str = include_str!("../tests/redaction/positives.txt");
const TARGET_BYTES: usize = 8 << 20;
const ROUNDS: u32 = 5;

fn lines(corpus: &str) -> Vec<String> {
    corpus
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("## ") && !l.contains("PRIVATE KEY"))
        .map(|l| l.replace("\\n", "\n").replace(['«', '»'], ""))
        .collect()
}

fn build(secret_every: Option<usize>) -> String {
    let negatives = lines(NEGATIVES);
    let positives = lines(POSITIVES);
    let mut text = String::with_capacity(TARGET_BYTES + 4096);
    let mut i = 0;
    while text.len() < TARGET_BYTES {
        match secret_every {
            Some(n) if i % n == n - 1 => text.push_str(&positives[(i / n) % positives.len()]),
            _ => text.push_str(&negatives[i % negatives.len()]),
        }
        text.push('\n');
        i += 1;
    }
    text
}

fn measure(name: &str, redactor: &Redactor, text: &str) {
    let (_, redacted) = redactor.redact(text); // warm up: compile the patterns
    let start = Instant::now();
    for _ in 0..ROUNDS {
        std::hint::black_box(redactor.redact(std::hint::black_box(text)));
    }
    let secs = start.elapsed().as_secs_f64() / f64::from(ROUNDS);
    let mb = text.len() as f64 / 1e6;
    println!(
        "{name:<28} {mb:6.2} MB  {:8.2} ms  {:8.1} MB/s  redacted={redacted}",
        secs * 1e3,
        mb / secs
    );
}

fn main() {
    let redactor = Redactor::new(&["s3cr3t-env-value-Q7".into(), "hunter2-policy-pw".into()]);
    measure("ordinary output (clean)", &redactor, &build(None));
    measure("mixed (1 secret / 20 lines)", &redactor, &build(Some(20)));
    measure(
        "clean, no policy secrets",
        &Redactor::default(),
        &build(None),
    );
}
