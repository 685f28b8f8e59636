//! Linux security primitives: landlock, seccomp, cgroups, capabilities.
//!
//! Each is split in two halves: a *prepare* half that runs in the supervisor (allocates,
//! opens files, builds the ruleset fd and the BPF program) and an *apply* half that runs
//! in the child between `clone` and `execve`, which must be async-signal-safe: raw
//! system calls only, no allocation, no locks.

pub mod caps;
pub mod cgroup;
pub mod landlock;
pub mod seccomp;
pub mod sys;
