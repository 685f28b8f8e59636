//! Fixtures shared by the crate's tests: shipped policies and scratch workspaces.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use tierbox_policy::Policy;

/// A policy shipped under `policies/`.
pub(crate) fn policy(name: &str) -> Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies")
        .join(name);
    Policy::from_toml(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A canonical temporary directory holding `ws/` (the workspace) and room beside it.
pub(crate) struct Scratch {
    _dir: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) ws: PathBuf,
}

/// A fresh [`Scratch`].
pub(crate) fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    Scratch {
        _dir: dir,
        root,
        ws,
    }
}
