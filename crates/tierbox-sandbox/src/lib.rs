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
//! A supervisor needs only [`contract`]: the handle of a running sandbox, launching,
//! tier selection, the process switches, the seccomp hand-off, a run's denials and the
//! host probes. The other modules are the backends' own.
//!
//! Unsafe code lives only in `sys.rs` files, each block with a `// SAFETY:` comment; the
//! compiler holds the rule (`deny(unsafe_code)` here, allowed on the `sys` modules only).

#![deny(unsafe_code)]

pub mod backend;
#[cfg(target_os = "linux")]
pub mod bwrap;
pub mod container;
#[cfg(target_os = "linux")]
pub mod contract;
pub mod egress;
#[cfg(target_os = "linux")]
pub mod launch;
#[cfg(target_os = "linux")]
pub mod layers;
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

#[cfg(all(test, target_os = "linux"))]
#[path = "layering_tests.rs"]
mod layering_tests;

#[cfg(test)]
mod test_fixtures;
