//! What recording Tier C's file refusals (`audit.file_refusals`) costs, audit on:
//!
//! 1. **The run**: native Tier C runs of `/bin/true` with the option off and on,
//!    interleaved in one process (each round off, on and off again in rotating order; the
//!    second off run against the first is the noise floor). On, a run adds its session's
//!    audit rule before its clone and hands it to the remover thread when its processes
//!    are gone. Measured spaced (no removal in flight when a run starts) and back to back.
//! 2. **Every other process of the host** while such a run lasts: a loop of `open` and
//!    `close` of an existing file (and one of `stat` of a missing one) on this process,
//!    with no audit rule and with one run's rules in place (they never match this
//!    process: the kernel still records every path call's names to evaluate them).
//!
//! Needs root (it turns audit on; the host's setting is restored at the end).
//!
//! `cargo bench -p tierbox-runner --bench file_refusals [-- ITERATIONS]`

// A benchmark harness: any setup failure should abort loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::p50_p90_ms;
use tierbox_policy::{Policy, ProcessRunRequest, TierCBackend, TierRequest};
use tierbox_runner::{RunOptions, Runner};
use tierbox_sandbox::linux::audit;

/// Calls per sample of the host-wide loop.
const LOOP_CALLS: u32 = 2_000;

/// Restores the host's audit setting when dropped.
struct Restore(bool);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = audit::set_enabled(self.0);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let iterations = support::iterations(200);
    let was = audit::enabled_now().expect("the kernel's audit socket (run as root)");
    let _restore = Restore(was);
    audit::set_enabled(true).expect("AUDIT_SET");
    let ws = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("state dir");
    let runner = |files: bool| {
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = vec!["true".to_owned()];
        policy.tier.backend = TierCBackend::Native;
        policy.audit.file_refusals = files;
        Runner::new(policy)
            .with_workspace(ws.path())
            .with_options(RunOptions {
                state_dir: state.path().to_path_buf(),
            })
    };
    let (without, with) = (runner(false), runner(true));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut request = ProcessRunRequest::new("true");
    request.tier = TierRequest::C;
    let run = |files: bool| -> Duration {
        let t = Instant::now();
        let outcome = rt
            .block_on(if files { &with } else { &without }.run(&request))
            .expect("run");
        let elapsed = t.elapsed();
        assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
        assert!(outcome.denials.is_empty(), "{:?}", outcome.denials);
        assert_eq!(
            outcome.enforcement.denial_reports[&tierbox_policy::enforcement::DenialLayer::Mounts]
                .applied,
            files,
            "{:?}",
            outcome.enforcement.denial_reports
        );
        elapsed
    };
    for _ in 0..10 {
        run(false);
        run(true);
    }
    // Spaced: before each run the rules of the ones before are removed (untimed), so the
    // run pays only its own rule; back to back: it also waits for the removal of the
    // previous run's rule, which holds the kernel's audit control lock for a grace period.
    for spaced in [true, false] {
        let r = support::SwitchRounds::measure(iterations, &run, || {
            if spaced {
                assert!(audit::files::flush_rule_removals());
            }
        });
        println!(
            "native Tier C: /bin/true, audit on, {iterations} interleaved rounds, {}",
            if spaced { "spaced" } else { "back to back" }
        );
        let (p50, p90) = p50_p90_ms(&r.off);
        println!("  audit.file_refusals off   p50 {p50:7.2} ms   p90 {p90:7.2} ms");
        let (p50, p90) = p50_p90_ms(&r.on);
        println!("  audit.file_refusals on    p50 {p50:7.2} ms   p90 {p90:7.2} ms");
        println!("  on / off: {}", r.ratio_line());
    }
    assert!(audit::files::flush_rule_removals());

    // 2. The host-wide cost: this process's own path calls, with one run's rules in place
    //    (held by a session begun on a thread of its own) and without.
    let existing = ws.path().join("existing");
    std::fs::write(&existing, b"x").unwrap();
    let missing = ws.path().join("missing");
    let sample = |f: &dyn Fn()| -> f64 {
        let t = Instant::now();
        for _ in 0..LOOP_CALLS {
            f();
        }
        t.elapsed().as_secs_f64() * 1e9 / f64::from(LOOP_CALLS)
    };
    let open_close = || drop(std::fs::File::open(&existing).unwrap());
    let stat_missing = || assert!(std::fs::metadata(&missing).is_err());
    let model = Arc::new(tierbox_policy::access::AccessModel::new(
        ws.path(),
        &tierbox_policy::plan::FsPlan::default(),
    ));
    let with_rules = |f: &dyn Fn()| -> f64 {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let model = Arc::clone(&model);
        let holder = std::thread::spawn(move || {
            let session = audit::AuditSession::begin(&audit::SessionWants { files: Some(model) })
                .expect("an audit session");
            assert!(
                session.files_error().is_none(),
                "{:?}",
                session.files_error()
            );
            tx.send(()).unwrap();
            done_rx.recv().unwrap();
            drop(session);
        });
        rx.recv().unwrap();
        let ns = sample(f);
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        // The rule is removed on the remover thread: gone before the next sample.
        assert!(audit::files::flush_rule_removals());
        ns
    };
    for (name, f) in [
        ("open + close of an existing file", &open_close as &dyn Fn()),
        ("stat of a missing file", &stat_missing as &dyn Fn()),
    ] {
        let rounds = iterations.clamp(20, 100);
        let (mut base, mut ruled, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..rounds {
            let (a, b) = if i % 2 == 0 {
                let a = sample(f);
                (a, with_rules(f))
            } else {
                let b = with_rules(f);
                (sample(f), b)
            };
            base.push(a);
            ruled.push(b);
            ratio.push(b / a);
        }
        println!(
            "host-wide, {name} ({rounds} rounds of {LOOP_CALLS} calls): no rule {:.0} ns, one run's rules {:.0} ns per call; ratio, median of rounds {:.2}",
            median(&mut base),
            median(&mut ruled),
            median(&mut ratio)
        );
    }
}
