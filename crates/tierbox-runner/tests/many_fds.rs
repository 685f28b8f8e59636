//! A run's setup does not depend on how many descriptors its supervisor holds: a
//! supervisor holding four times the run's `limits.open_files` descriptors (so every
//! descriptor it makes during a launch is numbered far above the run's limit) launches
//! Tier B, Tier C native, bwrap and podman runs that all succeed.
//!
//! Regression: a native Tier C child met its `RLIMIT_NOFILE` while the supervisor's
//! descriptors were numbered above it ("sandbox setup failed at
//! seccomp(SECCOMP_SET_MODE_FILTER): Too many open files"), which failed ~2 % of runs of
//! a busy server. Its own binary: the held descriptors are the whole process's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::OwnedFd;
use std::path::Path;

use tierbox_policy::{Layer, Policy, ProcessRunRequest, Tier, TierCBackend, TierRequest};
use tierbox_runner::{RunOptions, Runner};

/// The run's descriptor limit.
const OPEN_FILES: u64 = 64;

/// How many descriptors the supervisor holds, as a multiple of [`OPEN_FILES`].
const HELD_FACTOR: u64 = 4;

const IMAGE: &str = "localhost/tierbox-e2e:busybox";

fn runner(ws: &Path, state: &Path, backend: TierCBackend) -> Runner {
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["true".to_owned()];
    policy.limits.open_files = OPEN_FILES;
    policy.tier.backend = backend;
    if backend != TierCBackend::Native {
        policy.tier.optional_layers.push(Layer::Landlock);
    }
    if backend == TierCBackend::Podman {
        policy.tier.container.image = Some(IMAGE.to_owned());
    }
    Runner::new(policy)
        .with_workspace(ws)
        .with_options(RunOptions {
            state_dir: state.to_path_buf(),
        })
}

fn usable(test: &str, tier: Tier, backend: TierCBackend) -> bool {
    let facts = tierbox_sandbox::probe::host_facts();
    if let Err(e) = tierbox_sandbox::select::tier_available(tier, facts) {
        return !tierbox_test_support::skip(test, &e.to_string());
    }
    match backend {
        TierCBackend::Bwrap if !Path::new("/usr/bin/bwrap").exists() => {
            !tierbox_test_support::skip(test, "bubblewrap is not installed")
        }
        TierCBackend::Podman => tierbox_test_support::container_image::podman_with(test, IMAGE),
        _ => true,
    }
}

#[test]
fn a_supervisor_holding_many_descriptors_launches_every_backend() {
    let test = "a_supervisor_holding_many_descriptors_launches_every_backend";
    let null = std::fs::File::open("/dev/null").unwrap();
    let held: Vec<OwnedFd> = (0..OPEN_FILES * HELD_FACTOR)
        .map(|_| OwnedFd::from(null.try_clone().unwrap()))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases = [
        (Tier::B, TierCBackend::Native, TierRequest::B),
        (Tier::C, TierCBackend::Native, TierRequest::C),
        (Tier::C, TierCBackend::Bwrap, TierRequest::C),
        (Tier::C, TierCBackend::Podman, TierRequest::C),
    ];
    for (tier, backend, request) in cases {
        if !usable(test, tier, backend) {
            continue;
        }
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let r = runner(ws.path(), state.path(), backend);
        // Several runs: pooled and fresh resources alike.
        for round in 0..3 {
            let mut req = ProcessRunRequest::new("true");
            req.tier = request;
            let out = rt
                .block_on(r.run(&req))
                .unwrap_or_else(|e| panic!("{tier:?} {backend:?} round {round}: {e}"));
            assert_eq!(
                out.exit_code,
                Some(0),
                "{tier:?} {backend:?} round {round}: {}",
                out.stderr.text
            );
        }
    }
    drop(held);
}
