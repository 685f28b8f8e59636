//! A Tier B run's own mount namespace, as one launch plans it: who may make one here
//! ([`NsKind`]), its private `/tmp` and `/dev/shm` ([`super::mounts`]) and its protected
//! paths ([`super::protect`]), compiled into the [`NsPlan`] the child (or a warm slot's
//! launcher thread) carries out.
//!
//! The rule: a Tier B run either gets this namespace, or the launch says exactly what it
//! lacks — the `disk` and `protected_paths` layers missing with the reason (or refused,
//! when the policy requires them), an argument naming a path in `/tmp` refused with its
//! fix ([`tierbox_policy::Rejection::PathNeedsPrivateTmp`]) — never a silent "where
//! possible".

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tierbox_policy::Rejection;
use tierbox_policy::plan::Plan;

use super::mounts;
use crate::launch::slots::Slot;
use crate::linux::mounts::protect::Protection;
use crate::probe::HostFacts;
use crate::tier_b::launcher::{NsPlan, ThreadMounts};

/// How a run's mount namespace is made here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NsKind {
    /// A root supervisor, which may mount: a mount namespace (`CLONE_NEWNS`) of the
    /// run's own, whose private tmp is the bounded tmpfs it mounted.
    Root,
    /// An unprivileged supervisor where user namespaces work: the child makes a user
    /// namespace mapping only its own uid and gid (`setgroups` denied) with the mount
    /// namespace, and drops every capability it has in it before landlock and seccomp.
    /// Its private tmp is the run's directory (not bounded: mounting a tmpfs the
    /// supervisor could watch needs root).
    User,
}

/// Why a Tier B run has no mount namespace of its own here. `Clone` (io errors shared)
/// because [`own_ids_userns`] keeps its answer for the process.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum NoNamespace {
    /// An unprivileged supervisor's host refuses the user namespace (the probe's reason,
    /// naming the sysctl when there is one).
    #[error(
        "an unprivileged supervisor gives a tier b run its own /tmp, /dev/shm and protected paths in a user namespace, and this host refuses one: {why}"
    )]
    UserNamespaceRefused {
        /// The probe's reason.
        why: String,
    },
    /// The probe passed but making the user namespace failed.
    #[error(
        "an unprivileged supervisor gives a tier b run its own /tmp, /dev/shm and protected paths in a user namespace, and this host refuses one: making it failed: {source}"
    )]
    UserNamespaceFailed {
        /// What the kernel said.
        source: Arc<std::io::Error>,
    },
    /// A root supervisor's run whose bounded tmp was not mounted
    /// (`Slot::tmp_unbounded_why`).
    #[error("{why}")]
    TmpUnbounded {
        /// Why the slot's tmp is not bounded.
        why: String,
    },
}

/// Whether (and how) a Tier B run of this supervisor can have a mount namespace of its
/// own, before its slot exists: a root supervisor (whose mount of the bounded tmp may
/// still fail, see [`kind_for`]), or user namespaces. `Err`: why not.
pub(crate) fn available(facts: &HostFacts) -> Result<(), NoNamespace> {
    if facts.euid == 0 {
        return Ok(());
    }
    own_ids_userns(facts).map(drop)
}

/// Why an unprivileged supervisor's Tier B run lacks the `disk` layer: its private tmp is
/// not size-bounded, and, where user namespaces are refused, not its `/tmp` either.
pub(crate) fn unbounded_tmp_why(facts: &HostFacts) -> String {
    match available(facts) {
        Ok(()) => "an unprivileged supervisor cannot mount a size-limited TMPDIR for a tier b run: the run's private /tmp and /dev/shm (in a user namespace of its own) are a directory of the supervisor's, bounded per file only (limits.file_size_bytes; tier c bounds its /tmp)".to_owned(),
        Err(why) => format!(
            "an unprivileged supervisor cannot mount a size-limited TMPDIR for a tier b run, nor here give it a private /tmp and /dev/shm ({why}): a program writing /tmp gets EACCES (filesystem.writable += \"/tmp\" grants the host's), and /dev/shm is reachable only as the host's, through filesystem.writable (tier c bounds its /tmp and has its own /dev/shm)"
        ),
    }
}

/// The user namespace every Tier B run of this unprivileged supervisor joins before it
/// makes its mount namespace: one per process, mapping only the supervisor's uid and gid
/// to themselves (`setgroups` denied), made once (`linux::sys::own_ids_user_namespace`).
/// A run holds no capability in it once its setup is done, and the filter refuses it
/// every namespace call, so runs sharing it share nothing a run of the same uid would
/// not share anyway. `Err`: why this host refuses one.
fn own_ids_userns(facts: &HostFacts) -> Result<&'static OwnedFd, NoNamespace> {
    static USERNS: OnceLock<Result<OwnedFd, NoNamespace>> = OnceLock::new();
    USERNS
        .get_or_init(|| {
            if let Some(why) = crate::linux::userns::probe_tier_b_userns_cached().reason() {
                return Err(NoNamespace::UserNamespaceRefused {
                    why: why.to_owned(),
                });
            }
            crate::linux::sys::own_ids_user_namespace(facts.euid, facts.egid).map_err(|e| {
                NoNamespace::UserNamespaceFailed {
                    source: Arc::new(e),
                }
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Refuses `plan` when an argument names a path in the run's own `/tmp`
/// ([`tierbox_policy::plan::FsPlan::scratch_args`]) and the run can have none (`why`).
pub(crate) fn refuse_scratch_args(plan: &Plan, why: &str) -> Result<(), Rejection> {
    match plan.filesystem.scratch_args.first() {
        None => Ok(()),
        Some(a) => Err(Rejection::PathNeedsPrivateTmp {
            arg_index: a.arg_index,
            arg: a.arg.clone(),
            resolved: a.resolved.clone(),
            why: why.to_owned(),
        }),
    }
}

/// How this run's namespace is made, given its slot; `Err`: why it has none.
pub(crate) fn kind_for(facts: &HostFacts, slot: &Slot) -> Result<NsKind, NoNamespace> {
    if slot.tmp_bytes.is_some() {
        return Ok(NsKind::Root);
    }
    if facts.euid == 0 {
        return Err(NoNamespace::TmpUnbounded {
            why: slot.tmp_unbounded_why.clone(),
        });
    }
    own_ids_userns(facts).map(|_| NsKind::User)
}

/// A run's namespace: its trees (the private `/tmp` and `/dev/shm`, grants beneath `/tmp`
/// bound back), its protected paths, and the mediator's view of them.
pub(crate) struct PrivateMounts {
    pub(crate) kind: NsKind,
    /// The user namespace the child joins first ([`NsKind::User`]).
    userns: Option<&'static OwnedFd>,
    slot_tmp: PathBuf,
    ids: (u32, u32),
    moves: Vec<mounts::TreeMove>,
    pub(crate) views: Vec<(PathBuf, PathBuf)>,
    pub(crate) ns: NsPlan,
    /// How many protected targets and pins, and placeholders, for the report.
    pub(crate) protected: Option<(usize, usize)>,
    /// How many host secrets are covered ([`super::hide`]), when the landlock grants
    /// the system roots whole.
    pub(crate) hidden: Option<usize>,
}

impl PrivateMounts {
    /// The trees for `plan` in `slot` (the landlock grants decide which lie beneath
    /// `/tmp`), each with the object its source is now.
    pub(crate) fn plan(
        plan: &Plan,
        facts: &HostFacts,
        slot: &Slot,
        kind: NsKind,
        (uid, gid): (u32, u32),
        (read_only, read_write): (&[&Path], &[&Path]),
    ) -> std::io::Result<Self> {
        // The views as the host resolves them (`/dev/shm` may be a symlink to `/run/shm`).
        let tmp_view = std::fs::canonicalize(mounts::TMP_VIEW)?;
        let shm_view = std::fs::canonicalize(mounts::SHM_VIEW)?;
        let mut moves = mounts::plan(
            &slot.tmp,
            (&tmp_view, &shm_view),
            read_only,
            read_write,
            Path::is_dir,
        );
        let mut views = mounts::mediator_roots(&slot.tmp, (&tmp_view, &shm_view));
        // `dev_shm = "none"`: the host's /dev/shm stays, which landlock grants nothing of
        // (the policy refuses a writable /dev/shm with it).
        if plan.filesystem.dev_shm == tierbox_policy::DevShm::None {
            moves.retain(|m| m.dest != shm_view);
            views.retain(|(view, _)| *view != shm_view);
        }
        // The shared-memory directory is a source: it must exist to be planned.
        mounts::prepare(&slot.tmp, &[], (uid, gid))?;
        let trees = mounts::ns_trees(&slot.tmp, &moves)?;
        let dev_null = std::fs::symlink_metadata("/dev/null")
            .map(|m| crate::launch::private_ns::FileId::of_metadata(&m))?;
        let userns = match kind {
            NsKind::Root => None,
            NsKind::User => Some(own_ids_userns(facts).map_err(std::io::Error::other)?),
        };
        Ok(Self {
            kind,
            userns,
            slot_tmp: slot.tmp.clone(),
            ids: (uid, gid),
            moves,
            views,
            ns: NsPlan {
                userns: (kind == NsKind::User).then_some((uid, gid)),
                trees,
                protect: Vec::new(),
                hide: Vec::new(),
                dev_null,
            },
            protected: None,
            hidden: None,
        })
    }

    /// Adds the steps of `protection` (its placeholders made already).
    pub(crate) fn protect(&mut self, plan: &Plan, protection: &Protection) -> std::io::Result<()> {
        self.ns.protect = super::protect::steps(plan, protection)?;
        self.protected = Some((protection.targets.len(), protection.placeholders().count()));
        Ok(())
    }

    /// Adds the covers of the host's secrets the run's landlock grants leave to it.
    pub(crate) fn hide(&mut self, whole: &super::hide::WholeRoots) -> std::io::Result<()> {
        self.ns.hide = whole.cover_strings()?;
        self.hidden = Some(whole.covers.len());
        Ok(())
    }

    /// The user namespace the child joins before it makes the mount namespace.
    pub(crate) fn userns(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.userns.map(|fd| fd.as_fd())
    }

    /// Makes the mount points the trees need in the slot's tmp.
    pub(crate) fn prepare(&self) -> std::io::Result<()> {
        mounts::prepare(&self.slot_tmp, &self.moves, self.ids)
    }

    /// What a slot's launcher thread may hold for this run, if any: a root supervisor's
    /// namespace (a thread cannot join a user namespace) whose protected paths need no
    /// placeholder (a placeholder lives for one run: removing it afterwards would detach
    /// the thread's cover). The thread is checked before each run to still hold the
    /// protected paths as planned (`tier_b::launcher::ThreadNs`).
    pub(crate) fn for_thread<'a>(
        &'a self,
        prepare: &'a dyn Fn() -> std::io::Result<()>,
    ) -> Option<ThreadMounts<'a>> {
        let placeholders = self.protected.map_or(0, |(_, placeholders)| placeholders);
        (self.kind == NsKind::Root && placeholders == 0).then(|| ThreadMounts {
            ns: &self.ns,
            mount_points: self
                .moves
                .iter()
                .filter_map(|m| m.mount_point.as_ref().map(|(rel, _)| rel.clone()))
                .collect(),
            prepare,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant's text is the reason the string errors gave before the enum: it is a
    /// missing layer's reason and a refusal's `why`, which must not change with the type.
    #[test]
    fn no_namespace_reads_as_before() {
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        let cases = [
            (
                NoNamespace::UserNamespaceRefused {
                    why: "kernel.unprivileged_userns_clone = 0".to_owned(),
                },
                "an unprivileged supervisor gives a tier b run its own /tmp, /dev/shm and protected paths in a user namespace, and this host refuses one: kernel.unprivileged_userns_clone = 0".to_owned(),
            ),
            (
                NoNamespace::UserNamespaceFailed {
                    source: Arc::new(std::io::Error::from_raw_os_error(libc::EINVAL)),
                },
                format!(
                    "an unprivileged supervisor gives a tier b run its own /tmp, /dev/shm and protected paths in a user namespace, and this host refuses one: making it failed: {einval}"
                ),
            ),
            (
                NoNamespace::TmpUnbounded {
                    why: "the supervisor could not mount a tmpfs for the run's TMPDIR: EPERM"
                        .to_owned(),
                },
                "the supervisor could not mount a tmpfs for the run's TMPDIR: EPERM".to_owned(),
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text, "{error:?}");
        }
    }
}
