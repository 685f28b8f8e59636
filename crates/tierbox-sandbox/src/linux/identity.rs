//! The host identity a Tier C sandbox runs as (native and bwrap backends).
//!
//! Inside, the sandbox's user is uid and gid [`SANDBOX_UID`]/[`SANDBOX_GID`] (1000). What
//! that is on the host decides what the kernel lets the sandbox do wherever a check looks
//! at the host uid alone — global sysctls, files owned by root, SysV IPC, signals — so it
//! is never host root ([`SandboxIdentity`]):
//!
//! - **an unprivileged supervisor** can only map its own uid: the sandbox is the
//!   supervisor's user, as every process that user starts is;
//! - **a root supervisor** maps the sandbox to an unprivileged host uid: the policy's
//!   `tier.sandbox_uid`/`sandbox_gid`, else the workspace owner when that is not root
//!   (with the group [`run_gid`] gives: the owner's primary group when the owner is an
//!   ordinary user, never the workspace directory's group merely because it owns it,
//!   never group 0), else the start of root's `/etc/subuid` range, else
//!   [`tierbox_policy::DEFAULT_SANDBOX_ID`] ([`root_workspace_ids`]). Only a privileged process may write such
//!   a map, so the supervisor writes pid 1's maps itself while pid 1 waits. The workspace,
//!   and every writable grant owned by another uid, is reached through an **idmapped
//!   mount** that shows its owner as the sandbox's uid and stores the sandbox's new files
//!   as that owner's ([`idmapped_binds`]): ownership on the host stays what it was. The
//!   sandbox's pid 1 itself is ns uid 0 mapped to host uid 0 during setup (it reads the
//!   grants the way the supervisor can) and drops to the sandbox's uid once the program
//!   runs; the program never has uid 0: it changes to 1000 before it drops its
//!   capabilities, with `no_new_privs` and `nosuid` mounts (setuid files gain nothing).
//!   The bwrap backend joins a user namespace the supervisor made for the run
//!   ([`bwrap_user_namespace`], maps [`SandboxIdentity::bwrap_maps`]) and starts in a
//!   private mount namespace where the idmapped trees ([`idmapped_roots`]) already cover
//!   the writable roots.
//! - `tier.danger_sandbox_as_supervisor` keeps the supervisor's own uid — host root
//!   under a root supervisor — for hosts without idmapped mounts.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tierbox_policy::plan::Plan;

use super::mounts::{MountOp, MountPlan};
use super::sys;

/// The sandbox's uid inside its user namespace (non-root).
pub const SANDBOX_UID: u32 = 1000;
/// The sandbox's gid inside its user namespace.
pub const SANDBOX_GID: u32 = 1000;

/// Who a Tier C sandbox's user is on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxIdentity {
    /// The supervisor's own uid and gid (an unprivileged supervisor, or the policy's
    /// `danger_sandbox_as_supervisor`); pid 1 maps itself.
    Supervisor {
        /// Host uid.
        uid: u32,
        /// Host gid.
        gid: u32,
    },
    /// A root supervisor's unprivileged host identity for the sandbox; the supervisor
    /// writes the maps and idmaps writable binds owned by anyone else.
    Host {
        /// Host uid.
        uid: u32,
        /// Host gid.
        gid: u32,
        /// The workspace directory's group, when it is neither 0 nor `gid`: mapped to
        /// [`WORKSPACE_GROUP_NS_GID`] so that pid 1's setup (ns root) may create its mount
        /// points in the workspace, whose owner and group must both be mapped for its
        /// capabilities to cover them. No process of the sandbox is in that group.
        workspace_gid: Option<u32>,
    },
}

/// The ns gid a [`SandboxIdentity::Host`] sandbox's user namespace shows the workspace
/// directory's group as, when that group is not the sandbox's own (and not 0, which is
/// mapped as ns 0): no sandboxed process can join it (no `CAP_SETGID`, `setgroups`
/// denied), so it grants nothing; files of that group merely keep a name inside.
pub const WORKSPACE_GROUP_NS_GID: u32 = 1001;

impl SandboxIdentity {
    /// The host uid and gid.
    pub fn ids(self) -> (u32, u32) {
        match self {
            Self::Supervisor { uid, gid } | Self::Host { uid, gid, .. } => (uid, gid),
        }
    }

    /// The `/proc/<pid>/uid_map` and `gid_map` contents of the sandbox's user namespace.
    /// [`SandboxIdentity::Host`] also maps ns id 0 to host id 0: pid 1's own identity
    /// during setup, which no sandboxed process can take (see the module docs).
    pub fn maps(self) -> (String, String) {
        match self {
            Self::Supervisor { uid, gid } => (
                format!("{SANDBOX_UID} {uid} 1\n"),
                format!("{SANDBOX_GID} {gid} 1\n"),
            ),
            Self::Host {
                uid,
                gid,
                workspace_gid,
            } => (
                format!("0 0 1\n{SANDBOX_UID} {uid} 1\n"),
                match workspace_gid {
                    Some(w) => {
                        format!("0 0 1\n{SANDBOX_GID} {gid} 1\n{WORKSPACE_GROUP_NS_GID} {w} 1\n")
                    }
                    None => format!("0 0 1\n{SANDBOX_GID} {gid} 1\n"),
                },
            ),
        }
    }
}

/// The ns id host root (uid and gid 0) has in the user namespace a root supervisor makes
/// for a bwrap sandbox: the overflow id, so root's files look as they do in any
/// unprivileged user namespace (`nobody`). Host root is mapped at all so bwrap's setup,
/// which runs as the sandbox's uid with every capability in that namespace, may reach
/// root-owned paths the grants name (capabilities only cover inodes whose owner is
/// mapped); it is not ns id 0, because bwrap's switch from its starting uid (host 0) to
/// the sandbox's uid would then drop those capabilities before the setup. No process of
/// the sandbox can take this id: none has `CAP_SETUID`, every mount is `nosuid` and
/// `no_new_privs` is set.
pub const BWRAP_HOST_ROOT_NS_ID: u32 = 65534;

impl SandboxIdentity {
    /// The maps of the user namespace bwrap joins (`--userns`) for a
    /// [`SandboxIdentity::Host`] sandbox: the sandbox's uid and gid, and host root as
    /// [`BWRAP_HOST_ROOT_NS_ID`]. `None` for [`SandboxIdentity::Supervisor`], where bwrap
    /// makes its own (`--unshare-user`).
    pub fn bwrap_maps(self) -> Option<(String, String)> {
        match self {
            Self::Supervisor { .. } => None,
            Self::Host { uid, gid, .. } => Some((
                format!("{SANDBOX_UID} {uid} 1\n{BWRAP_HOST_ROOT_NS_ID} 0 1\n"),
                format!("{SANDBOX_GID} {gid} 1\n{BWRAP_HOST_ROOT_NS_ID} 0 1\n"),
            )),
        }
    }
}

/// The user namespace a bwrap sandbox of `identity` joins, made for one run (owned by
/// the root supervisor, so no process outside can join it); `None` when bwrap makes its
/// own.
pub fn bwrap_user_namespace(identity: SandboxIdentity) -> std::io::Result<Option<OwnedFd>> {
    identity
        .bwrap_maps()
        .map(|(uid_map, gid_map)| sys::new_user_namespace(&uid_map, &gid_map))
        .transpose()
}

/// Why a Tier C sandbox cannot run as its host identity here: the policy names an id
/// this supervisor cannot map, or a tree it must idmap cannot be. `Clone` (io errors
/// shared) because [`probe_idmapped_mounts`] keeps its answer for the process.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IdentityError {
    /// An unprivileged supervisor was asked for an id other than its own.
    #[error(
        "tier.sandbox_uid/sandbox_gid name an id other than the supervisor's ({euid}:{egid}); only a root supervisor can map another"
    )]
    OtherIdUnprivileged {
        /// The supervisor's effective uid.
        euid: u32,
        /// The supervisor's effective gid.
        egid: u32,
    },
    /// The workspace could not be stat'ed (its owner decides the sandbox's uid).
    #[error("stat of the workspace {}: {source}", workspace.display())]
    WorkspaceStat {
        /// The workspace.
        workspace: PathBuf,
        /// What `stat` said.
        source: Arc<std::io::Error>,
    },
    /// The source of a writable bind could not be stat'ed.
    #[error("stat of {}: {source}", path.display())]
    BindStat {
        /// The bind's source.
        path: PathBuf,
        /// What `stat` said.
        source: Arc<std::io::Error>,
    },
    /// The user namespace an idmapped mount needs could not be made.
    #[error(
        "a user namespace mapping {}:{} to {}:{}: {source}",
        owner.0, owner.1, sandbox.0, sandbox.1
    )]
    IdmapNamespace {
        /// The tree owner's host uid and gid.
        owner: (u32, u32),
        /// The sandbox's host uid and gid.
        sandbox: (u32, u32),
        /// Why the namespace was not made.
        source: Arc<std::io::Error>,
    },
    /// The kernel or the filesystem refused an idmapped mount of `path`.
    #[error(
        "an idmapped mount of {} (owner {}) for the sandbox's host uid {}: {source}; set tier.danger_sandbox_as_supervisor = true to run the sandbox as the supervisor's own uid instead",
        path.display(), owner.0, sandbox.0
    )]
    IdmappedMount {
        /// The tree.
        path: PathBuf,
        /// Its owner's host uid and gid.
        owner: (u32, u32),
        /// The sandbox's host uid and gid.
        sandbox: (u32, u32),
        /// What `open_tree`/`mount_setattr` said.
        source: Arc<std::io::Error>,
    },
    /// The probe of idmapped mounts needs a root supervisor (only root may idmap).
    #[error("needs a root supervisor")]
    ProbeNeedsRoot,
    /// The probe's directory could not be made.
    #[error("{}: {source}", dir.display())]
    ProbeDir {
        /// The directory, in the temporary directory.
        dir: PathBuf,
        /// What `mkdir` said.
        source: Arc<std::io::Error>,
    },
}

/// The identity `plan`'s sandbox runs as on this host, or why it cannot run.
pub fn resolve(plan: &Plan) -> Result<SandboxIdentity, IdentityError> {
    let choice = plan.tier.identity;
    let (euid, egid) = crate::launch::sys::current_ids();
    if euid != 0 {
        if choice.uid.is_some_and(|u| u != euid) || choice.gid.is_some_and(|g| g != egid) {
            return Err(IdentityError::OtherIdUnprivileged { euid, egid });
        }
        return Ok(SandboxIdentity::Supervisor {
            uid: euid,
            gid: egid,
        });
    }
    if choice.as_supervisor {
        return Ok(SandboxIdentity::Supervisor {
            uid: euid,
            gid: egid,
        });
    }
    let (owner, owner_gid) = std::fs::metadata(&plan.workspace)
        .map(|m| (m.uid(), m.gid()))
        .map_err(|e| IdentityError::WorkspaceStat {
            workspace: plan.workspace.clone(),
            source: Arc::new(e),
        })?;
    let default = if owner != 0 {
        (owner, run_gid(owner))
    } else {
        root_workspace_ids().0
    };
    let (uid, gid) = (
        choice.uid.unwrap_or(default.0),
        choice.gid.unwrap_or(default.1),
    );
    Ok(SandboxIdentity::Host {
        uid,
        gid,
        workspace_gid: (owner_gid != 0 && owner_gid != gid).then_some(owner_gid),
    })
}

/// The lowest uid of an ordinary (login) account (`UID_MIN` of `login.defs`): below it
/// are root and system accounts, whose groups a run never takes.
pub const ORDINARY_UID_MIN: u32 = 1000;

/// Where the accounts and their primary groups are read from.
pub const PASSWD_FILE: &str = "/etc/passwd";

/// The group a run whose files belong to `owner` (a non-root workspace owner) runs as, in
/// Tier B and Tier C: the owner's primary group from [`PASSWD_FILE`] when the owner is an
/// ordinary account (uid ≥ [`ORDINARY_UID_MIN`]) whose primary group is not 0; otherwise
/// the sandbox's own unprivileged gid ([`root_workspace_ids`]). Never the workspace
/// directory's group because it owns the workspace (a workspace `1500:0` would hand the
/// run group 0), never 0.
pub fn run_gid(owner: u32) -> u32 {
    let fallback = root_workspace_ids().0.1;
    if owner < ORDINARY_UID_MIN {
        return fallback;
    }
    std::fs::read_to_string(PASSWD_FILE)
        .ok()
        .and_then(|text| primary_gid(&text, owner))
        .filter(|&gid| gid != 0)
        .unwrap_or(fallback)
}

/// The primary gid of `uid` in a `/etc/passwd`-format text (`name:x:uid:gid:…`), `None`
/// when no well-formed line names it. Pure.
pub fn primary_gid(passwd: &str, uid: u32) -> Option<u32> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (_, _, u, g) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        (u.parse::<u32>().ok()? == uid)
            .then(|| g.parse::<u32>().ok())
            .flatten()
    })
}

/// The account name of `uid` in a `/etc/passwd`-format text (the first well-formed
/// line naming it), `None` when there is none. Pure.
///
/// ```
/// use tierbox_sandbox::linux::identity::account_name;
/// let passwd = "root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n";
/// assert_eq!(account_name(passwd, 1000).as_deref(), Some("dev"));
/// assert_eq!(account_name(passwd, 4242), None);
/// ```
pub fn account_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (name, _, u) = (fields.next()?, fields.next()?, fields.next()?);
        (!name.is_empty() && u.parse::<u32>().ok()? == uid).then(|| name.to_owned())
    })
}

/// Where the administrator sets aside subordinate uids and gids for each user's user
/// namespaces (`shadow`'s `newuidmap` reads the same files).
pub const SUBUID_FILE: &str = "/etc/subuid";
/// See [`SUBUID_FILE`].
pub const SUBGID_FILE: &str = "/etc/subgid";

/// The host uid and gid a root supervisor's sandbox runs as when root owns the workspace
/// and the policy names none, and where they come from: the first id of root's range in
/// `SUBUID_FILE` and `SUBGID_FILE` when both list one (ids set aside for root's user
/// namespaces, so no account uses them), else [`tierbox_policy::DEFAULT_SANDBOX_ID`].
/// Read once per process.
pub fn root_workspace_ids() -> ((u32, u32), &'static str) {
    static IDS: std::sync::OnceLock<((u32, u32), &'static str)> = std::sync::OnceLock::new();
    *IDS.get_or_init(|| {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| subordinate_start(&text, &["root", "0"]))
        };
        match (read(SUBUID_FILE), read(SUBGID_FILE)) {
            (Some(uid), Some(gid)) => ((uid, gid), "root's range in /etc/subuid and /etc/subgid"),
            _ => (
                (
                    tierbox_policy::DEFAULT_SANDBOX_ID,
                    tierbox_policy::DEFAULT_SANDBOX_ID,
                ),
                "tierbox_policy::DEFAULT_SANDBOX_ID",
            ),
        }
    })
}

/// The first id of the first range in a `/etc/subuid`-format text (`name:start:count` per
/// line) that belongs to one of `names`; `None` when there is none, or it is malformed,
/// empty, starts at 0 or runs past the last id. Pure.
pub fn subordinate_start(text: &str, names: &[&str]) -> Option<u32> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .find_map(|line| {
            let mut fields = line.split(':');
            let (name, start, count) = (fields.next()?, fields.next()?, fields.next()?);
            if fields.next().is_some() || !names.contains(&name) {
                return None;
            }
            let (start, count) = (start.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
            (start != 0 && count != 0 && start.checked_add(count - 1).is_some_and(|l| l < u32::MAX))
                .then_some(start)
        })
}

/// Most idmapping user namespaces kept (one per owner and sandbox identity pair); the
/// oldest is dropped. Each holds only a user namespace.
pub const IDMAP_NAMESPACES_KEPT: usize = 32;

/// A user namespace that maps `owner` (host uid, gid) to `sandbox` (host uid, gid), for
/// an idmapped mount that shows `owner`'s files as `sandbox`'s; made once per pair.
pub fn idmap_namespace(owner: (u32, u32), sandbox: (u32, u32)) -> std::io::Result<Arc<OwnedFd>> {
    type Entry = ((u32, u32), (u32, u32), Arc<OwnedFd>);
    static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, _, fd)) = cache.iter().find(|(o, s, _)| *o == owner && *s == sandbox) {
        return Ok(fd.clone());
    }
    let fd = Arc::new(sys::new_user_namespace(
        &format!("{} {} 1\n", owner.0, sandbox.0),
        &format!("{} {} 1\n", owner.1, sandbox.1),
    )?);
    cache.insert(0, (owner, sandbox, fd.clone()));
    cache.truncate(IDMAP_NAMESPACES_KEPT);
    Ok(fd)
}

/// A writable bind of a run made idmapped: the bind's destination, and the detached
/// idmapped tree of its source that pid 1 moves there instead of binding the source.
#[derive(Debug)]
pub struct IdmappedBind {
    /// The bind's destination (the same path as its source).
    pub dst: PathBuf,
    /// The detached tree (`open_tree` + `MOUNT_ATTR_IDMAP`).
    pub tree: OwnedFd,
}

/// The writable binds of `mplan` whose host owner is not the sandbox's uid, each as an
/// idmapped tree mapping that owner to `sandbox`. An error names the path and why
/// (idmapped mounts unsupported by the kernel or the filesystem).
pub fn idmapped_binds(
    mplan: &MountPlan,
    sandbox: (u32, u32),
) -> Result<Vec<IdmappedBind>, IdentityError> {
    let mut out = Vec::new();
    for op in &mplan.ops {
        let (MountOp::BindRw { src, dst, .. }
        | MountOp::Overlay {
            lower: src, dst, ..
        }) = op
        else {
            continue;
        };
        let meta = std::fs::metadata(src).map_err(|e| IdentityError::BindStat {
            path: src.clone(),
            source: Arc::new(e),
        })?;
        if let Some(tree) = idmapped_if_foreign(src, &meta, sandbox)? {
            out.push(IdmappedBind {
                dst: dst.clone(),
                tree,
            });
        }
    }
    Ok(out)
}

/// The writable roots of a bwrap run (each bound at its own path) whose host owner is not
/// the sandbox's uid, as idmapped trees, ancestors first; roots that do not exist are
/// skipped (bwrap skips them too).
pub fn idmapped_roots<'a>(
    roots: impl IntoIterator<Item = &'a PathBuf>,
    sandbox: (u32, u32),
) -> Result<Vec<IdmappedBind>, IdentityError> {
    let mut roots: Vec<&PathBuf> = roots.into_iter().collect();
    roots.sort();
    roots.dedup();
    let mut out = Vec::new();
    for root in roots {
        let Ok(meta) = std::fs::metadata(root) else {
            continue;
        };
        if let Some(tree) = idmapped_if_foreign(root, &meta, sandbox)? {
            out.push(IdmappedBind {
                dst: root.clone(),
                tree,
            });
        }
    }
    Ok(out)
}

fn idmapped_if_foreign(
    path: &Path,
    meta: &std::fs::Metadata,
    sandbox: (u32, u32),
) -> Result<Option<OwnedFd>, IdentityError> {
    let owner = (meta.uid(), meta.gid());
    if owner.0 == sandbox.0 {
        return Ok(None);
    }
    idmapped_tree_of(path, owner, sandbox).map(Some)
}

fn idmapped_tree_of(
    path: &Path,
    owner: (u32, u32),
    sandbox: (u32, u32),
) -> Result<OwnedFd, IdentityError> {
    let ns = idmap_namespace(owner, sandbox).map_err(|e| IdentityError::IdmapNamespace {
        owner,
        sandbox,
        source: Arc::new(e),
    })?;
    sys::idmapped_tree(path, ns.as_fd()).map_err(|e| IdentityError::IdmappedMount {
        path: path.to_owned(),
        owner,
        sandbox,
        source: Arc::new(e),
    })
}

/// Whether idmapped mounts work on this host, tried once on a fresh directory in the
/// temporary directory: `Ok` or why not (for `doctor`). A workspace on another
/// filesystem may still refuse them; a run says so.
pub fn probe_idmapped_mounts() -> Result<(), IdentityError> {
    static PROBE: std::sync::OnceLock<Result<(), IdentityError>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            if crate::launch::sys::current_ids().0 != 0 {
                return Err(IdentityError::ProbeNeedsRoot);
            }
            let dir =
                std::env::temp_dir().join(format!("tierbox-idmap-probe-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| IdentityError::ProbeDir {
                dir: dir.clone(),
                source: Arc::new(e),
            })?;
            let sandbox = root_workspace_ids().0;
            let result = idmapped_tree_of(&dir, (0, 0), sandbox).map(drop);
            let _ = std::fs::remove_dir(&dir);
            result
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant's text is the message the string errors gave before the enum: a
    /// user-visible refusal (run, `doctor`) that must not change with the type.
    #[test]
    fn identity_errors_read_as_before() {
        let io = || Arc::new(std::io::Error::from_raw_os_error(libc::EINVAL));
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL).to_string();
        let cases = [
            (
                IdentityError::OtherIdUnprivileged { euid: 1500, egid: 1600 },
                "tier.sandbox_uid/sandbox_gid name an id other than the supervisor's (1500:1600); only a root supervisor can map another".to_owned(),
            ),
            (
                IdentityError::WorkspaceStat { workspace: "/w".into(), source: io() },
                format!("stat of the workspace /w: {einval}"),
            ),
            (
                IdentityError::BindStat { path: "/w/out".into(), source: io() },
                format!("stat of /w/out: {einval}"),
            ),
            (
                IdentityError::IdmapNamespace { owner: (1, 2), sandbox: (3, 4), source: io() },
                format!("a user namespace mapping 1:2 to 3:4: {einval}"),
            ),
            (
                IdentityError::IdmappedMount {
                    path: "/w".into(),
                    owner: (1, 2),
                    sandbox: (3, 4),
                    source: io(),
                },
                format!("an idmapped mount of /w (owner 1) for the sandbox's host uid 3: {einval}; set tier.danger_sandbox_as_supervisor = true to run the sandbox as the supervisor's own uid instead"),
            ),
            (IdentityError::ProbeNeedsRoot, "needs a root supervisor".to_owned()),
            (
                IdentityError::ProbeDir { dir: "/tmp/p".into(), source: io() },
                format!("/tmp/p: {einval}"),
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text, "{error:?}");
        }
    }

    #[test]
    fn the_primary_group_is_read_from_passwd() {
        let passwd = "root:x:0:0::/root:/bin/sh\nalice:x:1500:1500::/home/alice:/bin/sh\nbob:x:1600:0::/home/bob:/bin/sh\nbroken:x:1700\n";
        assert_eq!(primary_gid(passwd, 1500), Some(1500));
        assert_eq!(primary_gid(passwd, 1600), Some(0));
        assert_eq!(primary_gid(passwd, 1700), None);
        assert_eq!(primary_gid(passwd, 4242), None);
    }

    /// A system account's group, group 0, and an account unknown to passwd are never
    /// taken: the sandbox's own gid is.
    #[test]
    fn a_run_never_takes_group_0_or_a_system_group() {
        let fallback = root_workspace_ids().0.1;
        assert_ne!(fallback, 0);
        for owner in [1, 33, 999, 4_000_000_000] {
            assert_eq!(run_gid(owner), fallback, "owner {owner}");
        }
    }

    #[test]
    fn root_s_subordinate_range_is_read_and_anything_malformed_is_ignored() {
        let root = ["root", "0"];
        assert_eq!(
            subordinate_start("root:100000:65536\n", &root),
            Some(100_000)
        );
        assert_eq!(
            subordinate_start("# admins\nalice:165536:65536\n0:231072:65536\n", &root),
            Some(231_072)
        );
        for text in [
            "",
            "alice:100000:65536",
            "root:0:65536",
            "root:100000:0",
            "root:100000",
            "root:100000:65536:extra",
            "root:x:65536",
            "root:4294967295:1",
            "root:4294901760:65536",
        ] {
            assert_eq!(subordinate_start(text, &root), None, "{text:?}");
        }
    }
}
