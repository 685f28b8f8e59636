//! Integration tests of tierbox-policy (one binary; modules under `suite/`).
mod suite;
