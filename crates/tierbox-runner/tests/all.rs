//! Integration tests of tierbox-runner: real Tier B runs on this host.
mod suite;
