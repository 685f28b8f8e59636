//! Paired benchmark of the denial report's cost: runs of `/bin/true` (refused nothing)
//! with the kernel's audit subsystem off and on, interleaved in one process (each round
//! off, on and off again in rotating order; the second off run against the first is the
//! noise floor), in Tier B and native Tier C. With audit on, a warm Tier B slot's
//! launcher thread carries the log flags and an audit session the run adopts; a Tier C
//! run starts a session at its clone; every run's end waits for the barrier record.
//!
//! Needs root (it turns audit on and off; the host's setting is restored at the end).
//!
//! `cargo bench -p tierbox-runner --bench denials [-- ITERATIONS]`

// A benchmark harness: any setup failure should abort loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::p50_p90_ms;
use tierbox_policy::{Policy, ProcessRunRequest, TierCBackend, TierRequest};
use tierbox_runner::{RunOptions, Runner};
use tierbox_sandbox::linux::audit;

/// Restores the host's audit setting when dropped.
struct Restore(bool);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = audit::set_enabled(self.0);
    }
}

fn main() {
    let iterations = support::iterations(200);
    let was = audit::enabled_now().expect("the kernel's audit socket (run as root)");
    let _restore = Restore(was);
    let ws = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("state dir");
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["true".to_owned()];
    policy.tier.backend = TierCBackend::Native;
    let runner = Runner::new(policy)
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    // As in a long-lived supervisor (`tierbox serve`): warm slots.
    tierbox_sandbox::launch::slots::set_pooling(true);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for tier in [TierRequest::B, TierRequest::C] {
        let mut request = ProcessRunRequest::new("true");
        request.tier = tier;
        let run = |on: bool| -> Duration {
            audit::set_enabled(on).expect("AUDIT_SET");
            let t = Instant::now();
            let outcome = rt.block_on(runner.run(&request)).expect("run");
            let elapsed = t.elapsed();
            assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
            assert!(outcome.denials.is_empty(), "{:?}", outcome.denials);
            // Landlock's refusals are recorded only from the audit records (seccomp's
            // argument rules are handed to the supervisor either way).
            assert_eq!(
                outcome.enforcement.denial_reports
                    [&tierbox_policy::enforcement::DenialLayer::Landlock]
                    .applied,
                on,
                "{:?}",
                outcome.enforcement.denial_reports
            );
            elapsed
        };
        for _ in 0..10 {
            run(false);
            run(true);
        }
        // Each round: audit off, audit on, and audit off again (the noise floor: the same
        // configuration measured twice), in an order that rotates per round.
        let r = support::SwitchRounds::measure(iterations, run, || {});
        println!("tier {tier:?}: /bin/true, {iterations} interleaved pairs, warm slots on");
        let (p50, p90) = p50_p90_ms(&r.off);
        println!(
            "  audit off (no audit records read)            p50 {:7.2} ms   p90 {:7.2} ms",
            p50, p90
        );
        let (p50, p90) = p50_p90_ms(&r.on);
        println!(
            "  audit on  (landlock and seccomp recorded)    p50 {:7.2} ms   p90 {:7.2} ms",
            p50, p90
        );
        println!("  ratio on / off: {}", r.ratio_line());
    }
    tierbox_sandbox::launch::slots::drain();
}
