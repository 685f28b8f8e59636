//! Tier A latency: a trivial WASI module (one `fd_write`), measured three ways in one
//! process so they see the same machine load.
//!
//! - warm: `Runner::run_wasm` with the module in the engine's memory cache (validation,
//!   a fresh `Store` and WASI context, instantiation from the `InstancePre`, the call,
//!   output capture and the `Outcome`);
//! - engine: the same through `WasmEngine::run` alone (no validation, no `Outcome`);
//! - cold: a new `WasmEngine` (a new process's first run) loading the compiled module
//!   from the on-disk cache, then running it.
//!
//! `cargo bench -p tierbox-runner --bench tier_a [-- ITERATIONS]`

// A benchmark harness: any setup failure should abort loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::percentile;
use tierbox_policy::wasm::WasmRunRequest;
use tierbox_policy::{Policy, ValidateContext};
use tierbox_runner::{RunOptions, Runner};
use tierbox_wasm::{OutputSink, WasmEngine};

const HELLO_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hi\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 3))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

struct Discard;
impl OutputSink for Discard {
    fn push(&self, _: &[u8]) -> bool {
        true
    }
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<8} n={:<5} p50 {:>8.1} us  p90 {:>8.1} us  min {:>8.1} us",
        samples.len(),
        us(percentile(&samples, 0.5)),
        us(percentile(&samples, 0.9)),
        us(samples[0]),
    );
}

fn main() {
    let iterations = support::iterations(2000);
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.wat"), HELLO_WAT).unwrap();
    let policy = Policy::builtin_default();
    let runner = Runner::new(policy.clone())
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    let request = WasmRunRequest::module("hello.wat");
    let plan = tierbox_policy::validate::validate_wasm(
        &policy,
        &request,
        &ValidateContext::new(ws.path()),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cache = state.path().join("bench-cache");
    let engine = WasmEngine::new(Some(cache.clone())).unwrap();
    // Compile once: fills the memory cache of both engines' paths and the disk cache.
    let first = rt.block_on(runner.run_wasm(&request)).unwrap();
    assert_eq!(first.stdout.text, "hi\n");
    rt.block_on(engine.run(&plan, Arc::new(Discard), Arc::new(Discard)))
        .unwrap();

    let (mut warm, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        let t = Instant::now();
        let o = rt.block_on(runner.run_wasm(&request)).unwrap();
        warm.push(t.elapsed());
        assert_eq!(o.exit_code, Some(0));
        let t = Instant::now();
        let r = rt
            .block_on(engine.run(&plan, Arc::new(Discard), Arc::new(Discard)))
            .unwrap();
        bare.push(t.elapsed());
        assert_eq!(r.exit_code, Some(0));
    }
    let mut cold = Vec::new();
    for _ in 0..(iterations / 20).max(20) {
        let t = Instant::now();
        let fresh = WasmEngine::new(Some(cache.clone())).unwrap();
        let r = rt
            .block_on(fresh.run(&plan, Arc::new(Discard), Arc::new(Discard)))
            .unwrap();
        cold.push(t.elapsed());
        assert_eq!(r.cache, tierbox_wasm::CacheSource::Disk);
    }
    report("warm", warm);
    report("engine", bare);
    report("cold", cold);
}
