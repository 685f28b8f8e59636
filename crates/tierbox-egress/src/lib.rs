//! The per-run filtering egress proxy (placeholder; see the crate description).
#![forbid(unsafe_code)]
