//! Load never fails a run that would pass alone: 16 concurrent clients post 2,000 runs of
//! `true` to `tierbox serve --http` with its default concurrency, in Tier B, Tier C
//! native and bwrap. Every answer is the run's success, or `429 server.busy` (counted,
//! not a failure); no run fails. Each backend must finish within [`BACKEND_DEADLINE`].
//! Its own binary: one server at a time on the machine's cores.
//!
//! Regression: a busy server failed ~2 % of native Tier C runs with "sandbox setup
//! failed at seccomp(SECCOMP_SET_MODE_FILTER): Too many open files".

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "serve/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

/// Runs per backend.
const RUNS: usize = 2000;
/// Concurrent clients.
const CLIENTS: usize = 16;
/// The most one backend's runs may take, debug build on a shared two-core machine
/// included (about 10–15 s here); past it the test fails rather than hangs.
const BACKEND_DEADLINE: Duration = Duration::from_secs(300);

/// Posts [`RUNS`] runs of `true` in `tier` from [`CLIENTS`] clients; returns the count of
/// each status and the failed answers.
fn hammer(s: &Server, tier: &str) -> (BTreeMap<u16, usize>, Vec<String>) {
    let next = Arc::new(AtomicUsize::new(0));
    let statuses = Arc::new(Mutex::new(BTreeMap::new()));
    let bad = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + BACKEND_DEADLINE;
    let body = format!(r#"{{"command":"true","tier":"{tier}"}}"#);
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            let (next, statuses, bad) = (next.clone(), statuses.clone(), bad.clone());
            let (addr, body) = (s.addr.clone(), body.clone());
            scope.spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < RUNS && Instant::now() < deadline {
                    let (status, _, answer) = raw(
                        &addr,
                        "POST",
                        "/v1/process/run",
                        Some(body.as_bytes()),
                        &[("Authorization", &format!("Bearer {TOKEN}"))],
                    );
                    let ok = match status {
                        200 => answer.contains(r#""exit_code":0"#),
                        429 => answer.contains("server.busy"),
                        _ => false,
                    };
                    if !ok {
                        bad.lock().unwrap().push(format!("{status}: {answer}"));
                    }
                    *statuses.lock().unwrap().entry(status).or_default() += 1;
                }
            });
        }
    });
    let statuses = statuses.lock().unwrap().clone();
    let bad = bad.lock().unwrap().clone();
    (statuses, bad)
}

fn policy(backend: &str) -> String {
    let base = policy_allowing("");
    base.replacen("[tier]\n", &format!("[tier]\nbackend = \"{backend}\"\n"), 1)
        .replace("optional_layers = [", "optional_layers = [\"landlock\", ")
}

/// One backend's load at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn case(test: &str, tier: &str, backend: &str) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if tier == "c" && !tier_c_available(test) {
        return;
    }
    if backend == "bwrap"
        && !std::path::Path::new("/usr/bin/bwrap").exists()
        && tierbox_test_support::skip(test, "bubblewrap is not installed")
    {
        return;
    }
    let s = Server::start(&[], Some(&policy(backend)));
    let started = Instant::now();
    let (statuses, bad) = hammer(&s, tier);
    let took = started.elapsed();
    let answered: usize = statuses.values().sum();
    let ok = statuses.get(&200).copied().unwrap_or(0);
    let busy = statuses.get(&429).copied().unwrap_or(0);
    eprintln!(
        "{test}: {answered} answers in {took:.1?} ({:.0} runs/s): {ok} ran, {busy} × 429 server.busy, {} failed",
        ok as f64 / took.as_secs_f64(),
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{test}: {} runs failed under load, first: {}",
        bad.len(),
        bad[0]
    );
    assert_eq!(
        answered, RUNS,
        "{test}: not every run was answered within {BACKEND_DEADLINE:?}"
    );
    assert!(ok > RUNS / 2, "{test}: {statuses:?}");
    assert!(s.stop().success());
}

#[test]
fn load_fails_no_tier_b_run() {
    case("load_fails_no_tier_b_run", "b", "native");
}

#[test]
fn load_fails_no_native_tier_c_run() {
    case("load_fails_no_native_tier_c_run", "c", "native");
}

#[test]
fn load_fails_no_bwrap_run() {
    case("load_fails_no_bwrap_run", "c", "bwrap");
}
