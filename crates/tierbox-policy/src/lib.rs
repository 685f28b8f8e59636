//! Tierbox policy: the request types, the policy document, typed rejections, and
//! [`validate()`], which turns a request into an inert [`Plan`] or a [`Rejection`].
//!
//! This crate runs nothing. Its only I/O is read-only path resolution (canonicalising
//! the workspace, resolving symlinks in arguments, finding the program in the sandbox
//! PATH), so everything here is unit-testable without spawning a process.
//!
//! ```
//! use tierbox_policy::{validate, Policy, ProcessRunRequest, ValidateContext};
//!
//! let ws = tempfile::tempdir().unwrap();
//! let policy = Policy::from_toml("version = 1\n[exec]\nallowed_executables = [\"ls\"]\n").unwrap();
//! let ctx = ValidateContext::new(ws.path());
//!
//! let plan = validate(&policy, &ProcessRunRequest::new("ls"), &ctx).unwrap();
//! assert_eq!(plan.argv, ["ls"]);
//!
//! let err = validate(&policy, &ProcessRunRequest::new("curl"), &ctx).unwrap_err();
//! assert_eq!(err.code(), "exec.not_allowed");
//!
//! let err = validate(&policy, &ProcessRunRequest::new("bash"), &ctx).unwrap_err();
//! assert_eq!(err.code(), "exec.interpreter_denied");
//! ```
#![forbid(unsafe_code)]

pub mod access;
pub mod egress_rules;
pub mod enforcement;
pub mod handle;
pub mod hosts;
pub mod json;
pub mod plan;
pub mod policy;
pub mod reach;
pub mod rejection;
pub mod request;
pub mod schema;
pub mod state_file;
pub mod trust;
pub mod unix_sockets;
pub mod validate;
pub mod wasm;

pub use enforcement::{Enforcement, LayerReport};
pub use plan::Plan;
pub use policy::{
    ContainerPolicy, DEFAULT_SANDBOX_ID, DevShm, EgressMode, KeepCaps, Layer, Policy, PolicyError,
    QuotaMode, Tier, TierCBackend, WorkspaceMode,
};
pub use rejection::Rejection;
pub use request::{Lifetime, ProcessRunRequest, TierRequest};
pub use validate::{ValidateContext, validate};
