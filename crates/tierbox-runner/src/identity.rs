//! What a runner's runs depend on besides the request: a local daemon reports its own,
//! and a client hands it a request only when the daemon's identity equals the one it
//! would run with itself — so a run through the daemon is the run the client would have
//! made, with the same policy, workspace, state directory (signing key, audit log) and
//! the same values of every supervisor variable validation reads.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::builder::Runner;

/// A runner's identity (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunnerIdentity {
    /// The Tierbox version.
    pub version: String,
    /// The effective uid of the supervisor.
    pub uid: u32,
    /// [`tierbox_attest::policy_digest`] of the policy.
    pub policy_digest: String,
    /// The workspace, canonical when it resolves.
    pub workspace: PathBuf,
    /// The state directory, canonical when it resolves.
    pub state_dir: PathBuf,
    /// Hex SHA-256 over the names and values of the supervisor variables validation reads
    /// under the policy ([`tierbox_policy::validate::supervisor_env_names`]); values are
    /// not revealed.
    pub environment: String,
}

impl RunnerIdentity {
    /// The names of the fields in which `self` and `other` differ (empty when equal).
    ///
    /// ```
    /// # let ws = tempfile::tempdir().unwrap();
    /// let runner = tierbox_runner::Runner::new(tierbox_policy::Policy::builtin_default())
    ///     .with_workspace(ws.path());
    /// let a = runner.identity();
    /// let mut b = a.clone();
    /// b.workspace.push("elsewhere");
    /// assert_eq!(a.differences(&b), ["workspace"]);
    /// assert!(a.differences(&a).is_empty());
    /// ```
    pub fn differences(&self, other: &Self) -> Vec<&'static str> {
        self.fields()
            .into_iter()
            .zip(other.fields())
            .filter(|((_, mine), (_, theirs))| mine != theirs)
            .map(|((name, _), _)| name)
            .collect()
    }

    /// Every field, named as [`Self::differences`] names it, as bytes (paths as theirs).
    /// The one place that lists them: a field added to the struct and not here fails to
    /// compile.
    fn fields(&self) -> [(&'static str, Cow<'_, [u8]>); 6] {
        let Self {
            version,
            uid,
            policy_digest,
            workspace,
            state_dir,
            environment,
        } = self;
        [
            ("version", Cow::Borrowed(version.as_bytes())),
            ("uid", Cow::Owned(uid.to_string().into_bytes())),
            ("policy", Cow::Borrowed(policy_digest.as_bytes())),
            (
                "workspace",
                Cow::Borrowed(workspace.as_os_str().as_encoded_bytes()),
            ),
            (
                "state_dir",
                Cow::Borrowed(state_dir.as_os_str().as_encoded_bytes()),
            ),
            ("environment", Cow::Borrowed(environment.as_bytes())),
        ]
    }

    /// Hex SHA-256 over every field (each named and length-prefixed, paths as their
    /// bytes): what a client sends with a run (`?identity=` on `POST /v1/process/run` and
    /// `/v1/wasm/run`) so that the server runs it only when its own identity is equal,
    /// without a separate exchange first. Equal identities have equal digests and any
    /// differing field changes it.
    ///
    /// ```
    /// # let ws = tempfile::tempdir().unwrap();
    /// let runner = tierbox_runner::Runner::new(tierbox_policy::Policy::builtin_default())
    ///     .with_workspace(ws.path());
    /// let a = runner.identity();
    /// let mut b = a.clone();
    /// assert_eq!(a.digest(), b.digest());
    /// b.uid += 1;
    /// assert_ne!(a.digest(), b.digest());
    /// ```
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        for (name, value) in self.fields() {
            hash.update(name.as_bytes());
            hash.update((value.len() as u64).to_le_bytes());
            hash.update(&value);
        }
        tierbox_attest::jcs::hex(&hash.finalize())
    }
}

impl Runner {
    /// This runner's identity in this process (see [`RunnerIdentity`]).
    pub fn identity(&self) -> RunnerIdentity {
        let names = tierbox_policy::validate::supervisor_env_names(self.policy());
        let mut hash = Sha256::new();
        for name in names {
            hash.update(name.as_bytes());
            match std::env::var_os(&name) {
                Some(value) => {
                    hash.update(b"=");
                    hash.update(value.as_encoded_bytes());
                }
                None => hash.update(b"\x01"),
            }
            hash.update(b"\0");
        }
        RunnerIdentity {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uid: tierbox_sandbox::contract::process::current_ids().0,
            policy_digest: self.policy_digest().to_owned(),
            workspace: canonical(self.workspace()),
            state_dir: canonical(&self.options().state_dir),
            environment: tierbox_attest::jcs::hex(&hash.finalize()),
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_identity_follows_what_validation_reads_and_nothing_else() {
        let ws = tempfile::tempdir().unwrap();
        let policy = tierbox_policy::Policy::builtin_default();
        let runner = Runner::new(policy.clone()).with_workspace(ws.path());
        let a = runner.identity();
        assert_eq!(a.workspace, std::fs::canonicalize(ws.path()).unwrap());
        assert_eq!(a, runner.identity());
        // A workspace given through a symlink is the same workspace.
        let link = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(ws.path(), link.path().join("ws")).unwrap();
        let via_link = Runner::new(policy.clone()).with_workspace(link.path().join("ws"));
        assert!(a.differences(&via_link.identity()).is_empty());
        // Another policy.
        let mut other = policy.clone();
        other
            .exec
            .allowed_executables
            .push("another-tool".to_owned());
        let b = Runner::new(other).with_workspace(ws.path()).identity();
        assert_eq!(a.differences(&b), ["policy"]);
        // A policy that reads one more variable of the supervisor: its value counts.
        let mut reads_path = policy.clone();
        reads_path.env.sensitive.push("PATH".to_owned());
        let c = Runner::new(reads_path).with_workspace(ws.path()).identity();
        assert_eq!(c.differences(&a), ["policy", "environment"]);
        assert_eq!(a.environment.len(), 64);
    }

    #[test]
    fn the_digest_changes_with_every_field() {
        let ws = tempfile::tempdir().unwrap();
        let a = Runner::new(tierbox_policy::Policy::builtin_default())
            .with_workspace(ws.path())
            .identity();
        assert_eq!(a.digest(), a.clone().digest());
        assert_eq!(a.digest().len(), 64);
        let changes: [fn(&mut RunnerIdentity); 6] = [
            |i| i.version.push('+'),
            |i| i.uid ^= 1,
            |i| i.policy_digest.push('0'),
            |i| i.workspace.push("x"),
            |i| i.state_dir.push("x"),
            |i| i.environment.push('0'),
        ];
        for change in changes {
            let mut b = a.clone();
            change(&mut b);
            assert_eq!(b.differences(&a).len(), 1);
            assert_ne!(b.digest(), a.digest(), "{:?}", b.differences(&a));
        }
    }
}
