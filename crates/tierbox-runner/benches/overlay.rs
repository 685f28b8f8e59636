//! Paired benchmark of review mode: spawn-to-exit of a native Tier C run with the
//! workspace direct, and the same run through an overlay (`workspace.mode = "overlay"`),
//! interleaved in one process so both see the same machine load:
//!
//! - `true`: nothing changes (the overlay's mount, its upper layer handed over, and the
//!   scan of an empty upper layer);
//! - `touch f`: one new file (the overlay plus the change set kept in the state directory,
//!   then discarded so every round starts alike).
//!
//! Prints p50/p90 of each and the median of the per-round differences overlay − direct,
//! the figure the overlay's cost is judged by (at most 0.5 ms).
//!
//! `cargo bench -p tierbox-runner --bench overlay [-- ITERATIONS]`

// A benchmark harness: any setup failure should abort loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::Instant;

use support::{ms, p50_p90_ms, percentile};
use tierbox_policy::{Policy, ProcessRunRequest, TierRequest, WorkspaceMode};
use tierbox_runner::review::ChangeStore;
use tierbox_runner::{RunOptions, Runner};

fn main() {
    let iterations = support::iterations(300);
    let ws = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("state dir");
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["true".to_owned(), "touch".to_owned()];
    let runner = Runner::new(policy)
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    let store = ChangeStore::new(state.path());
    tierbox_sandbox::launch::slots::set_pooling(true);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let request = |command: &str, args: &[&str], mode: WorkspaceMode| {
        let mut r = ProcessRunRequest::new(command);
        r.args = args.iter().map(|a| (*a).to_owned()).collect();
        r.tier = TierRequest::C;
        r.workspace_mode = Some(mode);
        r
    };
    let cases = [
        (
            "true",
            request("true", &[], WorkspaceMode::Direct),
            request("true", &[], WorkspaceMode::Overlay),
        ),
        (
            "touch f",
            request("touch", &["f"], WorkspaceMode::Direct),
            request("touch", &["f"], WorkspaceMode::Overlay),
        ),
    ];
    let run = |r: &ProcessRunRequest| {
        let t = Instant::now();
        let outcome = rt.block_on(runner.run(r)).expect("tier c run");
        let took = t.elapsed();
        assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
        // Every round starts alike: the direct run's file removed, the kept set dropped.
        let _ = std::fs::remove_file(ws.path().join("f"));
        if outcome.changes.as_ref().is_some_and(|c| !c.is_empty()) {
            store.discard(&outcome.run_id).expect("discard");
        }
        took
    };
    for (_, direct, overlay) in &cases {
        for _ in 0..20 {
            run(direct);
            run(overlay);
        }
    }
    println!(
        "spawn-to-exit in tier c native, workspace direct vs overlay, {iterations} interleaved rounds"
    );
    for (name, direct, overlay) in &cases {
        let (mut d, mut o, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..iterations {
            let (a, b) = if i % 2 == 0 {
                let a = run(direct);
                (a, run(overlay))
            } else {
                let b = run(overlay);
                (run(direct), b)
            };
            d.push(a);
            o.push(b);
            diffs.push(b.as_secs_f64() - a.as_secs_f64());
        }
        d.sort();
        o.sort();
        diffs.sort_by(f64::total_cmp);
        let (p50, p90) = p50_p90_ms(&d);
        println!("{name:<8} direct  p50 {:7.3} ms  p90 {:7.3} ms", p50, p90);
        let (p50, p90) = p50_p90_ms(&o);
        println!("{name:<8} overlay p50 {:7.3} ms  p90 {:7.3} ms", p50, p90);
        println!(
            "{name:<8} overlay - direct: median of rounds {:+.3} ms  (p50 - p50 {:+.3} ms)",
            diffs[diffs.len() / 2] * 1e3,
            ms(percentile(&o, 0.5)) - ms(percentile(&d, 0.5))
        );
    }
    tierbox_sandbox::launch::slots::drain();
}
