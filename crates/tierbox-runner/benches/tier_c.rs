//! Paired benchmark of Tier C: spawn-to-exit of `/bin/true` in a fully isolated sandbox,
//! interleaved in one process so every configuration sees the same machine load:
//!
//! - `plain`: `std::process::Command::new("/bin/true").output()`;
//! - `bwrap direct`: `bwrap` run by `Command` with the argv Tierbox's bwrap backend builds
//!   for the same Plan (seven namespaces, tmpfs root, the same binds and covers, fresh
//!   `/proc`, minimal `/dev`, `--cap-drop ALL`, `--die-with-parent`), without a seccomp fd
//!   (std's `Command` cannot pass one without `pre_exec`; bwrap's filter install costs
//!   0–3 % per the baseline measurements);
//! - `tierbox c/bwrap`: `Runner::run` with `tier.backend = "bwrap"` (validation, cgroup,
//!   seccomp on fd 3, capture, tree kill, cleanup);
//! - `tierbox c/native`: `Runner::run` with the native backend (the same, plus landlock).
//!
//! Prints p50/p90 of each, the median of the per-round ratios native / bwrap, and runs per
//! second with 2 concurrent callers (each on its own thread and runtime).
//!
//! `cargo bench -p tierbox-runner --bench tier_c [-- ITERATIONS]`

// A benchmark harness: any setup failure should abort loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use support::{ms, percentile};
use tierbox_policy::{Policy, ProcessRunRequest, TierCBackend, TierRequest, ValidateContext};
use tierbox_runner::{RunOptions, Runner};

fn runner(backend: TierCBackend, ws: &std::path::Path, state: &std::path::Path) -> Runner {
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["true".to_owned()];
    policy.tier.backend = backend;
    // bwrap has no landlock layer; accept its absence for that backend only.
    policy
        .tier
        .optional_layers
        .push(tierbox_policy::Layer::Landlock);
    Runner::new(policy)
        .with_workspace(ws)
        .with_options(RunOptions {
            state_dir: state.to_path_buf(),
        })
}

fn main() {
    let iterations = support::iterations(300);
    let ws = tempfile::tempdir().expect("tempdir");
    // A workspace a few seconds old, as every real one is: for the first
    // `RACY_MARGIN` after a directory changes, each run's search for repositories
    // rereads it (its change time is too recent to trust).
    std::thread::sleep(
        tierbox_policy::validate::RACY_MARGIN + std::time::Duration::from_millis(500),
    );
    let state = tempfile::tempdir().expect("state dir");
    let ws_path = ws.path().canonicalize().unwrap();
    let mut request = ProcessRunRequest::new("true");
    request.tier = TierRequest::C;
    let native = runner(TierCBackend::Native, &ws_path, state.path());
    let via_bwrap = runner(TierCBackend::Bwrap, &ws_path, state.path());
    tierbox_sandbox::launch::slots::set_pooling(true);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // The bwrap argv Tierbox builds for the same Plan.
    let info = tierbox_sandbox::bwrap::probe_bwrap_cached().ok();
    let bwrap_direct: Option<(PathBuf, Vec<OsString>)> = info.map(|info| {
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = vec!["true".to_owned()];
        let ctx = ValidateContext::new(&ws_path);
        let plan = tierbox_policy::validate(&policy, &request, &ctx).expect("valid");
        let opts = tierbox_sandbox::bwrap::BwrapOptions::new(
            info.features,
            tierbox_sandbox::bwrap::HostLayout::probe(&plan),
        );
        let argv = tierbox_sandbox::bwrap::bwrap_argv(&plan, &opts).expect("argv");
        (info.path.clone(), argv)
    });

    let plain = || {
        let t = Instant::now();
        let out = Command::new("/bin/true")
            .stdin(Stdio::null())
            .output()
            .expect("spawn /bin/true");
        assert!(out.status.success());
        t.elapsed()
    };
    let direct = || {
        let (path, argv) = bwrap_direct.as_ref()?;
        let t = Instant::now();
        let out = Command::new(path)
            .args(argv)
            .env_clear()
            .stdin(Stdio::null())
            .output()
            .expect("spawn bwrap");
        assert!(out.status.success(), "{out:?}");
        Some(t.elapsed())
    };
    let run = |r: &Runner| {
        let t = Instant::now();
        let outcome = rt.block_on(r.run(&request)).expect("tier c run");
        assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
        assert_eq!(outcome.tier, tierbox_policy::Tier::C);
        t.elapsed()
    };
    let bwrap_usable = bwrap_direct.is_some();

    for _ in 0..20 {
        plain();
        direct();
        run(&native);
        if bwrap_usable {
            run(&via_bwrap);
        }
    }
    let (mut p, mut d, mut b, mut n, mut ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations {
        // Rotate the order so no configuration always follows the same one.
        let mut round = [None; 4];
        for k in 0..4 {
            match (i + k) % 4 {
                0 => round[0] = Some(plain()),
                1 => round[1] = direct(),
                2 if bwrap_usable => round[2] = Some(run(&via_bwrap)),
                3 => round[3] = Some(run(&native)),
                _ => {}
            }
        }
        p.extend(round[0]);
        d.extend(round[1]);
        b.extend(round[2]);
        n.extend(round[3]);
        if let (Some(bw), Some(nat)) = (round[2], round[3]) {
            ratios.push(nat.as_secs_f64() / bw.as_secs_f64());
        }
    }
    for v in [&mut p, &mut d, &mut b, &mut n] {
        v.sort();
    }
    ratios.sort_by(f64::total_cmp);
    println!("spawn-to-exit of /bin/true in tier c, {iterations} interleaved rounds");
    for (name, v) in [
        ("plain Command::output", &p),
        ("bwrap direct (same argv)", &d),
        ("tierbox c/bwrap (Runner::run)", &b),
        ("tierbox c/native (Runner::run)", &n),
    ] {
        if v.is_empty() {
            println!("{name:<32} not measured (bwrap unavailable)");
            continue;
        }
        println!(
            "{name:<32} p50 {:7.3} ms   p90 {:7.3} ms",
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.9))
        );
    }
    if !ratios.is_empty() {
        println!(
            "ratio native / tierbox-bwrap: median of rounds {:.2}  (p50/p50 {:.2})",
            ratios[ratios.len() / 2],
            ms(percentile(&n, 0.5)) / ms(percentile(&b, 0.5))
        );
    }
    if !d.is_empty() {
        println!(
            "ratio native / bwrap direct: p50/p50 {:.2};  native / plain: p50/p50 {:.2}",
            ms(percentile(&n, 0.5)) / ms(percentile(&d, 0.5)),
            ms(percentile(&n, 0.5)) / ms(percentile(&p, 0.5))
        );
    }

    // Throughput with 2 concurrent callers.
    let per_caller = iterations.max(50);
    for (name, backend) in [
        ("tierbox c/native", TierCBackend::Native),
        ("tierbox c/bwrap", TierCBackend::Bwrap),
    ] {
        if backend == TierCBackend::Bwrap && !bwrap_usable {
            continue;
        }
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..2 {
                let ws = ws_path.clone();
                let state = state.path().to_path_buf();
                let request = request.clone();
                s.spawn(move || {
                    let r = runner(backend, &ws, &state);
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    for _ in 0..per_caller {
                        let o = rt.block_on(r.run(&request)).expect("run");
                        assert_eq!(o.exit_code, Some(0), "{o:?}");
                    }
                });
            }
        });
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{name:<32} 2 concurrent callers: {:.0} runs/s ({} runs in {:.2} s)",
            (2 * per_caller) as f64 / secs,
            2 * per_caller,
            secs
        );
    }
    tierbox_sandbox::launch::slots::drain();
}
