//! Integration tests of the sandbox guarantees: each runs `tierbox-probe` through the real
//! runner (`validate` → `run_plan`) and fails when a probe finds its guarantee broken.
//! One binary; modules under `suite/`.
//!
//! Tests that need a host feature (landlock, seccomp, a usable cgroup, root) print
//! `SKIP <test>: <reason>` and pass when it is missing, unless `CI=true`, where they fail.
//! `#[ignore]`d tests document known gaps (and one is a helper process); run them with
//! `cargo test -p tierbox-probe -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Whether the suite runs with slot pooling on (`pooled.rs`) or off (this binary).
const POOLED: bool = false;

mod suite;
