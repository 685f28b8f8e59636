//! Why a workspace root is refused (`scope.workspace_refused`), and what lifts each rule.
//!
//! One code covers several rules, and they are lifted by different changes: a system or
//! home directory by choosing another workspace or by `danger_any_workspace_root`; one of
//! Tierbox's own files by choosing another workspace or moving that file, never by the
//! policy. So the fix is a property of the rule, computed where the rule is found, and a
//! rule never names a fix that would leave the workspace refused: a system directory that
//! also holds one of Tierbox's own files is not offered `danger_any_workspace_root`.

use std::fmt;
use std::path::PathBuf;

/// The rule that refuses a workspace root ([`crate::Rejection::WorkspaceRefused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkspaceRule {
    /// The filesystem root, a system directory or below one, a directory holding every
    /// user's files, or a home itself: [`HostRule`]. `danger_any_workspace_root` lifts it
    /// unless the directory also holds (or lies in) one of Tierbox's own files, `own`.
    Host {
        rule: HostRule,
        own: Option<OwnFile>,
    },
    /// It holds (`holds`) or lies inside one of Tierbox's own files, at `path`: nothing
    /// in the policy lifts this.
    Own {
        file: OwnFile,
        path: PathBuf,
        holds: bool,
    },
}

/// The host rules `danger_any_workspace_root` lifts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostRule {
    /// `/`.
    FilesystemRoot,
    /// One of [`crate::validate::REFUSED_WORKSPACE_TREES`] or below it.
    SystemTree { tree: PathBuf },
    /// One of [`crate::validate::REFUSED_WORKSPACE_DIRS`] itself.
    SharedDir { dir: PathBuf },
    /// A home directory itself (the supervisor's `$HOME`, `/home/<user>`, a home in
    /// `/etc/passwd`).
    Home,
}

/// One of Tierbox's own files, which no run may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnFile {
    /// The supervisor's state directory (signing key, module cache, spill files).
    StateDir,
    /// The policy's `audit.log`.
    AuditLog,
    /// The policy's `audit.signing_key`.
    SigningKey,
    /// The Tier A runtimes directory.
    RuntimesDir,
}

/// A change that lets a refused workspace root through: each of a rule's
/// [`WorkspaceRule::fixes`] does so alone (unless another rule refuses the result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceFix {
    /// Another workspace root: `--workspace`, or the policy's `workspace_root`.
    OtherWorkspace,
    /// `danger_any_workspace_root = true` in the policy.
    DangerAnyWorkspaceRoot,
    /// That own file elsewhere, outside the workspace (its setting:
    /// [`OwnFile::setting`]).
    MoveOwnFile(OwnFile),
}

impl OwnFile {
    /// What it is, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::StateDir => "the state directory",
            Self::AuditLog => "the audit log",
            Self::SigningKey => "the attestation signing key",
            Self::RuntimesDir => "the Tier A runtimes directory",
        }
    }

    /// Where it is set.
    pub fn setting(self) -> &'static str {
        match self {
            Self::StateDir => "--state-dir, default $XDG_STATE_HOME/tierbox",
            Self::AuditLog => "the policy's audit.log",
            Self::SigningKey => "the policy's audit.signing_key",
            Self::RuntimesDir => "$TIERBOX_RUNTIMES_DIR",
        }
    }
}

impl WorkspaceRule {
    /// The changes that lift this rule, each on its own, most usual first.
    pub fn fixes(&self) -> Vec<WorkspaceFix> {
        match self {
            Self::Host { own: None, .. } => vec![
                WorkspaceFix::OtherWorkspace,
                WorkspaceFix::DangerAnyWorkspaceRoot,
            ],
            Self::Host { own: Some(_), .. } => vec![WorkspaceFix::OtherWorkspace],
            Self::Own { file, .. } => {
                vec![
                    WorkspaceFix::OtherWorkspace,
                    WorkspaceFix::MoveOwnFile(*file),
                ]
            }
        }
    }

    /// The fixes as one sentence, for the rejection's message.
    pub fn fix(&self) -> String {
        let mut text = self
            .fixes()
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("; or ");
        let not_lifted = match self {
            Self::Host { own: Some(own), .. } => Some(format!(
                "danger_any_workspace_root would not lift it: it also holds {}",
                own.name()
            )),
            Self::Own { .. } => Some(
                "danger_any_workspace_root does not lift this rule, whatever the policy".to_owned(),
            ),
            Self::Host { own: None, .. } => None,
        };
        if let Some(n) = not_lifted {
            text.push_str("; ");
            text.push_str(&n);
        }
        text
    }
}

impl fmt::Display for WorkspaceRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Host { rule, .. } => rule.fmt(f),
            Self::Own { file, path, holds } => {
                let (what, path) = (file.name(), path.display());
                if *holds {
                    write!(
                        f,
                        "it contains {what} {path}, which no run may reach (Tierbox's own state)"
                    )
                } else {
                    write!(
                        f,
                        "it lies inside {what} {path}, which no run may reach (Tierbox's own state)"
                    )
                }
            }
        }
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FilesystemRoot => f.write_str("it is the filesystem root"),
            Self::SystemTree { tree } => write!(
                f,
                "it is the system directory {} or lies below it",
                tree.display()
            ),
            Self::SharedDir { dir } => write!(
                f,
                "it is {}, which holds every user's or service's files",
                dir.display()
            ),
            Self::Home => f.write_str(
                "it is a home directory itself (its dotfiles configure the user's shell, git and ssh)",
            ),
        }
    }
}

impl fmt::Display for WorkspaceFix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OtherWorkspace => f.write_str(
                "choose another workspace with --workspace (or the policy's workspace_root): a project directory, outside Tierbox's own state",
            ),
            Self::DangerAnyWorkspaceRoot => {
                f.write_str("a policy may lift this rule with danger_any_workspace_root = true")
            }
            Self::MoveOwnFile(file) => write!(
                f,
                "put {} elsewhere, apart from the workspace ({})",
                file.name(),
                file.setting()
            ),
        }
    }
}
