//! Tierbox as a service: the MCP server ([`mcp`]) and the HTTP API ([`http`]) over one
//! set of operations ([`service`]).
//!
//! ```no_run
//! use tierbox_policy::Policy;
//! use tierbox_runner::Runner;
//! use tierbox_server::service::Service;
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let service = Service::new(Runner::new(Policy::builtin_default()));
//! // One MCP session over stdio; its run_owned processes end with it.
//! tierbox_server::mcp::serve_session(service, rmcp::transport::stdio()).await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod conns;
pub mod files;
pub mod http;
pub mod mcp;
pub mod mcp_stdio;
pub mod openapi;
pub mod results;
pub mod serve;
pub mod service;
pub mod sessions;
pub mod term_ws;
pub mod terms;
