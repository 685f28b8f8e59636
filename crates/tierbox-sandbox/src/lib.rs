//! Tierbox isolation backends.
//!
//! A backend carries out a [`tierbox_policy::Plan`] and reports what it enforced; it makes
//! no policy decisions. This crate holds the host probe (what this kernel can enforce),
//! tier selection (never a silent downgrade), and the launchers:
//!
//! - `tier_b`: Tier B — direct spawn with a new session, rlimits, a rebuilt environment,
//!   dropped capabilities, `no_new_privs`, landlock, seccomp and a cgroup;
//! - `launch`: starting sandboxed processes, shared by every Linux backend (the cloned
//!   child and its setup, launcher threads, warm slots, the reaper, chmod mediation);
//! - `tier_c`: Tier C on Linux — the native namespace sandbox (`linux::ns`) or
//!   bubblewrap (`bwrap`), with the run's cgroup;
//! - `linux`: the Linux security primitives shared by Tier B and Tier C;
//! - `container`: Tier C in Docker or Podman (argv builder, engine probe, launch on
//!   Linux);
//! - [`macos`]: Tier C on macOS — the `sandbox-exec` profile (built and tested
//!   everywhere, run on macOS only);
//! - [`windows`]: Tier C on Windows — Job Object limits, command line and environment
//!   block (built and tested everywhere, run on Windows only).
//!
//! A supervisor needs only [`contract`]: the handle of a running sandbox, launching,
//! tier selection, the process switches, the seccomp hand-off, a run's denials and the
//! host probes. On Linux the other modules are the backends' own and crate-private
//! (`launch`, `linux`, `tier_b`, `tier_c`, `bwrap`, `container`, `backend`, `running`,
//! `select`, `probe`, `preflight`, `placeholders`, `egress`): a change inside them that
//! keeps the contract as it is needs no change in a supervisor. The cargo feature
//! `test-support` makes them public for tests and benches — this crate's doctests and
//! other crates' tests that drive a backend directly or inspect its internals (the
//! runner's, the CLI's and the probe suite's) — and only `[dev-dependencies]` enable
//! it: a test of the runner crate (`tests/layering.rs`) fails when a normal dependency
//! does. The items that only such tests use exist only with the feature.
//!
//! Unsafe code lives only in `sys.rs` files, each block with a `// SAFETY:` comment; the
//! compiler holds the rule (`deny(unsafe_code)` here, allowed on the `sys` modules only).

#![deny(unsafe_code)]

// The backends' internals: crate-private, and public only with the `test-support` feature,
// which this crate's doctests and other crates' tests and benches enable through their
// `[dev-dependencies]` (a test of the runner crate fails when a normal dependency enables
// it). Spelled out in pairs, not made by a macro: rustfmt does not follow a `mod` declared
// inside a macro.
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod bwrap;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod bwrap;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod launch;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod launch;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod layers;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod layers;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod linux;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod linux;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod placeholders;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod placeholders;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod preflight;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod preflight;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod probe;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod probe;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod running;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod running;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod select;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod select;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod tier_b;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod tier_b;
#[cfg(all(target_os = "linux", feature = "test-support"))]
pub mod tier_c;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod tier_c;

// Built on every platform, and internal on Linux only: elsewhere there is no contract, and
// these are the crate's interface for the platform's backend.
#[cfg(any(not(target_os = "linux"), feature = "test-support"))]
pub mod backend;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod backend;
#[cfg(any(not(target_os = "linux"), feature = "test-support"))]
pub mod container;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod container;
#[cfg(any(not(target_os = "linux"), feature = "test-support"))]
pub mod egress;
#[cfg(all(target_os = "linux", not(feature = "test-support")))]
pub(crate) mod egress;

// What a supervisor uses; `process` and `watchdog` are whole modules of the contract.
#[cfg(target_os = "linux")]
pub mod contract;
#[cfg(target_os = "linux")]
pub mod process;
#[cfg(target_os = "linux")]
pub mod watchdog;

// Tier C on macOS and on Windows, built and tested on every platform.
pub mod macos;
pub mod windows;

#[cfg(all(test, target_os = "linux"))]
#[path = "layering_tests.rs"]
mod layering_tests;

#[cfg(test)]
mod test_fixtures;
