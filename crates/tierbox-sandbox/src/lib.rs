//! Tierbox isolation backends.
//!
//! A backend carries out a [`tierbox_policy::Plan`] and reports what it enforced; it makes
//! no policy decisions. This crate holds the host probe (what this kernel can enforce),
//! tier selection (never a silent downgrade), and the launchers:
//!
//! - [`tier_b`]: Tier B — direct spawn with a new session, rlimits, a rebuilt environment,
//!   dropped capabilities, `no_new_privs`, landlock, seccomp and a cgroup;
//! - [`launch`]: starting sandboxed processes, shared by every Linux backend (the cloned
//!   child and its setup, launcher threads, warm slots, the reaper, chmod mediation);
//! - [`tier_c`]: Tier C on Linux — the native namespace sandbox ([`linux::ns`]) or
//!   bubblewrap ([`bwrap`]), with the run's cgroup;
//! - [`linux`]: the Linux security primitives shared by Tier B and Tier C;
//! - [`container`]: Tier C in Docker or Podman (argv builder, engine probe, launch on
//!   Linux);
//! - [`macos`]: Tier C on macOS — the `sandbox-exec` profile (built and tested
//!   everywhere, run on macOS only);
//! - [`windows`]: Tier C on Windows — Job Object limits, command line and environment
//!   block (built and tested everywhere, run on Windows only).
//!
//! Unsafe code lives only in `sys.rs` files, each block with a `// SAFETY:` comment; the
//! compiler holds the rule (`deny(unsafe_code)` here, allowed on the `sys` modules only).

#![deny(unsafe_code)]

pub mod backend;
#[cfg(target_os = "linux")]
pub mod bwrap;
pub mod container;
pub mod egress;
#[cfg(target_os = "linux")]
pub mod launch;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod macos;
#[cfg(target_os = "linux")]
pub mod placeholders;
#[cfg(target_os = "linux")]
pub mod preflight;
#[cfg(target_os = "linux")]
pub mod probe;
#[cfg(target_os = "linux")]
pub mod process;
#[cfg(target_os = "linux")]
pub mod running;
#[cfg(target_os = "linux")]
pub mod select;
#[cfg(target_os = "linux")]
pub mod tier_b;
#[cfg(target_os = "linux")]
pub mod tier_c;
#[cfg(target_os = "linux")]
pub mod watchdog;
pub mod windows;

/// The former home of Tier B and the launcher, kept for existing callers: Tier B is
/// [`tier_b`], what every backend shares to start a process is [`launch`].
#[cfg(target_os = "linux")]
pub mod spawn {
    pub use crate::launch::{
        ChildStep, ExitInfo, LaunchError, LaunchOptions, Launched, MAX_ARMED_LAUNCHERS, Slot,
        mediate, reaper, slots, sweep_orphaned_groups,
    };
    pub use crate::tier_b::{BACKEND, BACKEND_NAME, launch};
}

#[cfg(test)]
mod test_fixtures;
