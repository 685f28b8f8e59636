//! Tierbox runner: the supervisor that launches a validated Plan in a sandbox, enforces
//! the deadline and the output quota, kills the whole process tree, and returns an
//! [`Outcome`]; plus the library API ([`Sandbox::command`], [`Runner`]).
#![forbid(unsafe_code)]

pub mod audit;
pub mod background;
pub mod builder;
pub mod capture;
pub mod changes;
pub mod denials;
pub mod files;
pub mod home;
pub mod host;
pub mod identity;
pub mod outcome;
pub mod protected;
mod reach;
pub mod review;
pub mod ring;
pub mod spill;
pub mod stdin;
pub mod stream;
pub mod supervisor;
pub mod term;
pub mod terminate;
pub mod wasm;
pub mod wire;

pub use builder::{Checked, Prepared, RunRequest, Runner, Sandbox, SandboxedCommand};
pub use identity::RunnerIdentity;
pub use outcome::{
    HostSocket, LIMIT_EXIT_STATUS, LimitHit, Outcome, PrivilegedSocketWarning,
    SANDBOX_FAILURE_EXIT_STATUS, StreamOutput, Usage, VIEW_TEXT_BYTES,
};
pub use stdin::{StdinReport, StdinSource};
pub use stream::OutputEvent;
pub use supervisor::{RunError, RunOptions, enable_subreaper, run_plan, run_plan_streaming};
pub use wasm::{run_wasm_plan, run_wasm_plan_streaming};
