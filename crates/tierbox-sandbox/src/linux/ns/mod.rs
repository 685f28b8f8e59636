//! Tier C, Linux native: the sandbox child, created with `clone` straight from the
//! supervisor: the default Tier C backend on Linux (`tier_c`).
//!
//! [`child::launch_native`] prepares everything in the supervisor ([`child`]: safe
//! code) and clones the sandbox's pid 1, whose setup and the program's are raw system
//! calls in `sys` (one file per process role).
//!
//! # Design decisions
//!
//! **pid 1: a clone of the supervisor for setup, then an exec'd static reaper.** pid 1
//! is cloned with every Tier C namespace (`CLONE_NEWUSER | NEWNS | NEWPID | NEWNET | NEWIPC
//! | NEWUTS | NEWCGROUP`) and *without* `CLONE_VM`: it runs on a copy-on-write copy of the
//! supervisor's memory, so it can stay alive as the namespace's init after the
//! supervisor's `clone` returns and do the namespace-wide setup without exec'ing anything
//! first. It then starts the program with `CLONE_VM | CLONE_VFORK` (posix_spawn-style;
//! pid 2), reports that, and execs `tierbox-init` ([`init`]): a freestanding static
//! program of a few KiB, embedded in the supervisor and run from a sealed memfd, that
//! loops — reap every orphan, forward [`init::reaper::FORWARDED_SIGNALS`] with `kill(-1, sig)`, and
//! when the program ends kill and reap the rest, report its wait status and exit with its
//! code. pid 1's exit makes the kernel kill whatever is left in the namespace, so the tree
//! dies with the program (or with pid 1 when the supervisor SIGKILLs it).
//!
//! Trade-off measured against the alternatives:
//! - the program as pid 1 (one clone, fastest) does not reap orphans (zombies pile up in
//!   long builds) and ignores every signal it has no handler for, so SIGTERM from the
//!   supervisor would do nothing: rejected for correctness.
//! - exec'ing a helper *before* setup costs one more `execve` of a full binary (~0.5–1 ms
//!   on this VM) on the run's critical path.
//! - staying a copy of the supervisor for the whole run makes the supervisor take a
//!   copy-on-write fault (and a TLB shootdown across its threads) on every page it writes
//!   while the run lasts; a busy server spent a third of its CPU there.
//! - unmapping that copy from inside pid 1 and carrying on in the same program (the design
//!   this replaces) is not correct by construction: the compiler may route any copy
//!   through libc's `memmove`, whose CPU-dependent variants read libc's unmapped data;
//!   pid 1 segfaulted on every run of the debug build on CPUs without AVX-512.
//! - chosen: the exec of `tierbox-init` happens after the program is started and
//!   reported, so it overlaps the program's run; it drops the whole copy at once, and what
//!   runs afterwards can only reach its own pages (see [`init`]). Until the exec pid 1 is
//!   non-dumpable (the program cannot read `/proc/1/mem` or `/proc/1/environ`, and seccomp
//!   denies `ptrace`/`process_vm_readv`), it closes every fd except the report pipe and
//!   the image, and the supervisor's argv is wiped from its copy so `/proc/1/cmdline`
//!   shows nothing. A long-lived single-threaded launcher (the zygote of ARCHITECTURE.md)
//!   would also remove the page-table copy at `clone` and the faults during setup.
//!
//! **Id maps: written by pid 1 itself**, one line each: `1000 <supervisor euid> 1` and
//! `1000 <supervisor egid> 1`, `setgroups` = `deny` first (the kernel lets a process map
//! its own outside euid/egid without privilege in the parent namespace; mapping any other
//! id, e.g. the workspace owner as Tier B does, needs `CAP_SETUID` there, i.e. the
//! supervisor writing the maps, which costs a round trip). Consequence: files the sandbox
//! creates are owned by the supervisor's euid on the host, and supplementary groups
//! inherited from the supervisor cannot be dropped (setgroups is denied) — they show as
//! the overflow gid inside.
//!
//! **Mounts: the planner's ops, executed in order** ([`crate::linux::mounts::mount_plan`]
//! compiled by [`child::compile_ops`]), after a bubblewrap-style staging prologue: `/`
//! made `MS_REC | MS_PRIVATE`, a small tmpfs on the host's `/tmp` (in our namespace only),
//! `pivot_root` into it with the host's root at `/oldroot`, the root tmpfs at
//! `/newroot`. Binds use the new mount API: the source is opened with `openat2(O_PATH,
//! RESOLVE_NO_SYMLINKS)` and its kind checked against the op before
//! `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)` and `move_mount` (which does not follow a
//! symlink at the destination, as the `/dev/null` covers need); read-only remounts are
//! `mount_setattr(AT_RECURSIVE)`, which only ever adds flags (so a locked flag is never
//! cleared). `/proc` is mounted while the host's proc is still visible under `/oldroot`
//! (the kernel requires a fully visible proc in a user namespace); the final `pivot_root`
//! detaches the staging tmpfs and the host tree in one `umount2(MNT_DETACH)`.
//!
//! **Network namespace: from a pool when the supervisor may make them**
//! ([`netns_pool`]): a fresh namespace with `lo` up, made ahead of the run by a filler
//! thread, joined by the cloning thread for the `clone` alone (without `CLONE_NEWNET`);
//! otherwise `CLONE_NEWNET` and pid 1 brings `lo` up.
//!
//! Order of pid 1's setup (each step says why in `setup`, its real calls are in `sys`):
//! pdeathsig → join the run cgroup → id maps → setsid → hostname → `lo` up (own namespace
//! only) → the egress proxy's listener (when the plan needs it; passed to the supervisor)
//! → mount ops (pivot included) → landlock rules for its own mounts → non-dumpable, name
//! → clone the program → report → exec the reaper. The program: stdio → close-on-exec everything else → cwd →
//! rlimits → drop capabilities → `no_new_privs` → landlock → seccomp (last, so it blocks
//! no setup call) → empty signal mask → `execve`.
//!
//! The supervisor blocks on the report pipe until the program is exec'd (a few hundred
//! microseconds).

pub mod child;
pub mod init;
pub mod netns_pool;
pub mod reach;
mod setup;
#[allow(unsafe_code)]
pub(crate) mod sys;

pub use child::{NativeError, NativeOptions, launch_native};
#[cfg(test)]
pub use child::{NativeExit, wait_native};

use crate::linux::seccomp::SeccompSpec;

/// The seccomp filter of Tier C (both backends): the shared deny list with nested
/// namespaces denied; inet and unix sockets allowed, since the network namespace has only
/// loopback; no metadata denials, since the program's uid is not 0 and it has no
/// capabilities; IPC allowed, since the IPC namespace is the sandbox's own.
pub fn tier_c_seccomp_spec() -> SeccompSpec {
    SeccompSpec {
        deny_namespaces: true,
        deny_file_metadata: false,
        mediate_chmod: false,
        deny_ipc: false,
        inet: crate::linux::seccomp::InetSockets::Any,
        allow_unix_sockets: true,
        notify_refusals: false,
        chown_noop_gid: None,
    }
}

/// The native backend's filter: [`tier_c_seccomp_spec`], handing the argument rules'
/// refusals to the supervisor where the kernel has seccomp user notification (the
/// program installs it with a listener).
pub fn native_seccomp_spec() -> SeccompSpec {
    SeccompSpec {
        notify_refusals: crate::launch::user_notif_available(),
        chown_noop_gid: None,
        ..tier_c_seccomp_spec()
    }
}

#[cfg(test)]
#[path = "child_tests.rs"]
mod child_tests;
