//! Linux security primitives: landlock, seccomp, cgroups, capabilities.
//!
//! Each is split in two halves: a *prepare* half that runs in the supervisor (allocates,
//! opens files, builds the ruleset fd and the BPF program) and an *apply* half that runs
//! in the child between `clone` and `execve`, which must be async-signal-safe: raw
//! system calls only, no allocation, no locks.
//!
//! | primitive | prepare (supervisor) | apply (child, in `sys`) |
//! |---|---|---|
//! | [`landlock`] | [`landlock::PreparedLandlock::prepare`] → ruleset fd | `sys::landlock_restrict_self` |
//! | [`seccomp`] | [`seccomp::SeccompProgram::build`] → BPF | `sys::set_no_new_privs`, `sys::seccomp_set_filter` |
//! | [`caps`] | [`caps::last_cap`] | `sys::set_securebits_noroot`, `sys::drop_bounding_set`, `sys::clear_ambient`, `sys::set_ids`, `sys::capset_zero` |
//! | [`cgroup`] | [`cgroup::RunCgroup::create`] → `cgroup.procs` fds | `sys::write_all_raw(fd, b"0")` |
//!
//! Host probes for `doctor` and tier selection: [`landlock::probe_abi`],
//! [`seccomp::probe_seccomp`], `cgroup::probe_cached`.

pub mod audit;
pub mod caps;
pub mod cgroup;
pub mod exec;
pub mod identity;
pub mod landlock;
pub(crate) mod mount_table;
pub mod mounts;
pub mod ns;
pub mod seccomp;
pub mod step;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod userns;
