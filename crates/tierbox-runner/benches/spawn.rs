//! Paired benchmark: a Tier B run of `/bin/true` through the library API against a plain
//! `std::process::Command` spawn of the same program with the same environment,
//! interleaved (A B A B …) in one process so both see the same machine load. Prints
//! p50/p90 of each and the median of the per-pair ratios.
//!
//! `cargo bench -p tierbox-runner --bench spawn [-- ITERATIONS] [--no-pool]`

// A benchmark harness: any setup failure should abort loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::percentile;
use tierbox_policy::{Policy, ProcessRunRequest, TierRequest};
use tierbox_runner::{RunOptions, Runner};

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let iterations = support::iterations(400);
    let ws = tempfile::tempdir().expect("tempdir");
    // A workspace a few seconds old, as every real one is: for the first
    // `RACY_MARGIN` after a directory changes, each run's search for repositories
    // rereads it (its change time is too recent to trust).
    std::thread::sleep(
        tierbox_policy::validate::RACY_MARGIN + std::time::Duration::from_millis(500),
    );
    let state = tempfile::tempdir().expect("state dir");
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["true".to_owned()];
    let runner = Runner::new(policy)
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    // Pinned to Tier B: `auto` would pick Tier C wherever user namespaces work.
    let mut request = ProcessRunRequest::new("true");
    request.tier = TierRequest::B;
    let pooled = !std::env::args().any(|a| a == "--no-pool");
    tierbox_sandbox::launch::slots::set_pooling(pooled);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // The plain spawn gets the environment the sandboxed program gets: an inherited one
    // (a shell's, or `cargo bench`'s with its `LD_LIBRARY_PATH`, which sends the dynamic
    // loader through extra directories) would make the reference slower than it is.
    let env = match runner
        .prepare(tierbox_runner::builder::RunRequest::Process(&request))
        .expect("valid")
    {
        tierbox_runner::builder::Prepared::Native(plan) => plan.env,
        tierbox_runner::builder::Prepared::Wasm(_) => panic!("tier b expected"),
    };
    let plain = || {
        let t = Instant::now();
        let out = Command::new("/bin/true")
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .expect("spawn /bin/true");
        assert!(out.status.success());
        t.elapsed()
    };
    let tierbox = || {
        let t = Instant::now();
        let outcome = rt.block_on(runner.run(&request)).expect("tier b run");
        assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
        assert_eq!(
            outcome.tier,
            tierbox_policy::Tier::B,
            "the benchmark measures tier b"
        );
        t.elapsed()
    };
    let tierbox_check = || {
        let t = Instant::now();
        runner.check(&request).expect("valid");
        t.elapsed()
    };

    // Warm-up: page cache, the launcher thread, the host probe.
    for _ in 0..20 {
        plain();
        tierbox();
    }
    let mut a = Vec::with_capacity(iterations);
    let mut b = Vec::with_capacity(iterations);
    let mut v = Vec::with_capacity(iterations);
    let mut ratios = Vec::with_capacity(iterations);
    for i in 0..iterations {
        // Alternate which goes first so neither always runs on a cold cache line.
        let (pa, pb) = if i % 2 == 0 {
            let pa = plain();
            (pa, tierbox())
        } else {
            let pb = tierbox();
            (plain(), pb)
        };
        v.push(tierbox_check());
        ratios.push(pb.as_secs_f64() / pa.as_secs_f64());
        a.push(pa);
        b.push(pb);
    }
    a.sort();
    b.sort();
    v.sort();
    ratios.sort_by(f64::total_cmp);
    tierbox_sandbox::launch::slots::drain();
    println!(
        "spawn of /bin/true, {iterations} interleaved pairs, warm slots {}",
        if pooled { "on" } else { "off (--no-pool)" }
    );
    println!(
        "plain std::process::Command::output   p50 {:8.1} us   p90 {:8.1} us",
        us(percentile(&a, 0.5)),
        us(percentile(&a, 0.9))
    );
    println!(
        "tierbox tier b (Runner::run)           p50 {:8.1} us   p90 {:8.1} us",
        us(percentile(&b, 0.5)),
        us(percentile(&b, 0.9))
    );
    println!(
        "  of which validate() (Runner::check)  p50 {:8.1} us",
        us(percentile(&v, 0.5))
    );
    println!(
        "ratio tierbox / plain: median of pairs {:.2}  (p50/p50 {:.2})",
        ratios[ratios.len() / 2],
        us(percentile(&b, 0.5)) / us(percentile(&a, 0.5))
    );
}
