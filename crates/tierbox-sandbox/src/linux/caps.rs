//! Capabilities: the supervisor-side facts the child needs to drop every capability, and
//! the order in which the child-side calls of `super::sys` must run.
//!
//! Invariants kept here:
//!
//! - **Nothing survives exec.** After the sequence below the sandboxed program has empty
//!   effective, permitted, inheritable, ambient and bounding sets, and (when the launcher
//!   was privileged) locked securebits, so neither uid 0 nor a setuid/file-capability
//!   binary can regain a capability.
//! - **The child only issues raw system calls**; [`last_cap`] is read here, in the
//!   supervisor, before `clone`.
//!
//! Order in the child (each step needs what the previous one leaves):
//!
//! 1. `super::sys::set_securebits_noroot`: needs `CAP_SETPCAP`, so first. `EPERM` when
//!    the launcher is unprivileged (then there is nothing to lock). Only a read when the
//!    bits are already locked (inherited from an armed launcher thread).
//! 2. `super::sys::drop_bounding_set(last_cap())`: also needs `CAP_SETPCAP`; reads
//!    each capability first and drops only those present.
//! 3. `super::sys::clear_ambient`: `capset` in step 5 empties the ambient set with the
//!    others, so this matters only for a helper that keeps its capabilities (step 5
//!    skipped); the program sequence (`linux::exec`) makes it whenever it drops
//!    privileges, one rule for both tiers.
//! 4. `super::sys::set_ids`: needs `CAP_SETUID`/`CAP_SETGID`; with `NO_SETUID_FIXUP`
//!    locked the uid change does *not* clear capabilities, hence step 5.
//! 5. `super::sys::capset_zero`: empties effective, permitted and inheritable, and
//!    with them ambient (the kernel keeps ambient ⊆ permitted ∩ inheritable).
//! 6. `no_new_privs`, landlock, seccomp (see `linux/exec.rs`).

use std::sync::OnceLock;

/// The highest capability number assumed when `/proc/sys/kernel/cap_last_cap` cannot be
/// read: `CAP_CHECKPOINT_RESTORE` (40), the last one as of Linux 5.9–6.18. Dropping an
/// unknown number fails with `EINVAL`, which the drop ignores, so overestimating is safe.
pub const DEFAULT_LAST_CAP: u32 = 40;

/// Where the kernel publishes its highest capability number.
const CAP_LAST_CAP_PATH: &str = "/proc/sys/kernel/cap_last_cap";

/// The highest capability number this kernel knows, read once from
/// `/proc/sys/kernel/cap_last_cap` and cached; [`DEFAULT_LAST_CAP`] when unreadable.
pub fn last_cap() -> u32 {
    static LAST_CAP: OnceLock<u32> = OnceLock::new();
    *LAST_CAP.get_or_init(|| {
        std::fs::read_to_string(CAP_LAST_CAP_PATH)
            .ok()
            .and_then(|s| parse_last_cap(&s))
            .unwrap_or(DEFAULT_LAST_CAP)
    })
}

/// Parse the content of `cap_last_cap`; `None` for anything but a number in `0..=63`.
fn parse_last_cap(text: &str) -> Option<u32> {
    text.trim().parse::<u32>().ok().filter(|&n| n < 64)
}

#[cfg(test)]
use super::sys::read_cap_eff_from_status;

#[cfg(test)]
#[path = "caps_tests.rs"]
mod tests;
