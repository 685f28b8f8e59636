//! The same sandbox guarantees as `all.rs`, checked again in a long-lived supervisor:
//! slot pooling on (as in `tierbox serve`). A pooled Tier B run is cloned by its slot's
//! launcher thread, which holds the landlock domain, the seccomp filters and the chmod
//! hand-off for the child to inherit (see `tierbox_sandbox::launch`); a pooled Tier C run
//! ends on its pid 1's report. Every probe must hold the same both ways. Pooling is
//! process-wide, hence a binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Whether the suite runs with slot pooling on (this binary) or off (`all.rs`).
const POOLED: bool = true;

mod suite;
