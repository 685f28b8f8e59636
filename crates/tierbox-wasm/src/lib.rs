//! Tier A: WASM modules (WASI preview 1) and components (WASI preview 2) on wasmtime,
//! with explicit capability grants.
//!
//! - One [`WasmEngine`] per process (cranelift). Compiled code is cached by the SHA-256 of
//!   the module, in memory (with its `InstancePre`, so a warm run only instantiates) and,
//!   when a cache directory is given, on disk, so a second process does not recompile.
//! - One `Store` per run. The guest starts with nothing: no preopened directory, empty
//!   stdin, no environment, no network. The [`WasmPlan`](tierbox_policy::wasm::WasmPlan)
//!   lists every grant.
//! - Limits: fuel (CPU work), an epoch deadline driven by the wall clock (compilation
//!   counts against it), memory and table sizes and instance counts through a resource
//!   limiter, and a module size cap. Hitting one is reported as which one.
//! - Output goes to an [`OutputSink`] chunk by chunk, so the caller applies the same
//!   quota, truncation and redaction rules as for processes; in `kill` mode a sink that
//!   refuses a chunk stops the guest.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use tierbox_policy::{Policy, ValidateContext};
//! use tierbox_policy::validate::validate_wasm;
//! use tierbox_policy::wasm::WasmRunRequest;
//! use tierbox_wasm::{OutputSink, WasmEngine};
//!
//! #[derive(Default)]
//! struct Collect(Mutex<Vec<u8>>);
//! impl OutputSink for Collect {
//!     fn push(&self, chunk: &[u8]) -> bool {
//!         self.0.lock().unwrap().extend_from_slice(chunk);
//!         true
//!     }
//! }
//!
//! let ws = tempfile::tempdir().unwrap();
//! std::fs::write(ws.path().join("hi.wat"), r#"(module
//!   (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
//!   (memory (export "memory") 1)
//!   (data (i32.const 16) "hi\n")
//!   (func (export "_start")
//!     (i32.store (i32.const 0) (i32.const 16)) (i32.store (i32.const 4) (i32.const 3))
//!     (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#).unwrap();
//! let plan = validate_wasm(&Policy::default(), &WasmRunRequest::module("hi.wat"),
//!     &ValidateContext::new(ws.path())).unwrap();
//!
//! let engine = WasmEngine::new(None).unwrap();
//! let out = Arc::new(Collect::default());
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let report = rt.block_on(engine.run(&plan, out.clone(), Arc::new(Collect::default()))).unwrap();
//! assert_eq!(report.exit_code, Some(0));
//! assert_eq!(*out.0.lock().unwrap(), b"hi\n");
//! ```
// Only `sys.rs` may use unsafe code (loading precompiled code from the disk cache).
#![deny(unsafe_code)]

mod cache;
pub mod complexity;
mod engine;
mod io;
mod limits;
mod module_file;
mod net;
pub mod progress;
mod run;
#[allow(unsafe_code)]
mod sys;

pub use engine::{EPOCH_TICK, MAX_CONCURRENT_COMPILATIONS, MAX_MEMORY_CACHED_MODULES, WasmEngine};
pub use io::OutputSink;
pub use net::{MAX_NET_TARGETS, NetReport};
pub use run::{CacheSource, GuestStdin, RunReport, WasmError, WasmLimit};

/// The Tier A backend in outcomes and attestations.
pub const BACKEND: tierbox_policy::enforcement::BackendId =
    tierbox_policy::enforcement::BackendId::TierAWasmtime;
/// [`BACKEND`]'s name.
pub const BACKEND_NAME: &str = BACKEND.name();
