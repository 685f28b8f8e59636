//! Argument paths: an argument that provably names a path is accepted when the run sees
//! that path with the access the argument implies, and refused when it does not.
//!
//! This check is best effort and validates only: arguments are **never rewritten**
//! (Palyra's rewriter turned `git status` into `git <cwd>/status`). It reads argv text,
//! so it cannot see paths a program computes, reads from config files or environment
//! variables, or opens after a concurrent rename (TOCTOU); in tiers B and C the kernel
//! (landlock, mount namespaces) enforces the real boundary, and SECURITY.md says so. Its
//! job is to refuse early, with the policy change that helps, what the sandbox would
//! refuse anyway — and never to refuse what the sandbox allows.
//!
//! **What the run sees** ([`Visible`]) is one model, the one the mounts, landlock and
//! `tierbox explain --path` use ([`AccessModel`]): the workspace, the policy's
//! `filesystem.read_only` and `filesystem.writable` grants and the system roots
//! read-only, minus `filesystem.deny_read`, host secrets, and with `filesystem.protected`
//! read-only. To it the sandbox adds its own mounts, which the model leaves out: `/proc`
//! (read-only; the run's own `/proc/self/fd/N` writable), the devices every run has
//! ([`PROVIDED_DEVICES`], [`RUN_STDIO_PATHS`], `/dev/fd/N`), `/dev/shm` where
//! `filesystem.dev_shm = "private"`, the run's private `/tmp` ([`SCRATCH_ROOTS`]) and its
//! private `HOME` for `~`. The host's entries under those mounts are not what the run
//! sees, so a path there is not followed on the host.
//!
//! **Which arguments are paths.** An argument is checked when it provably names one:
//! absolute; containing a `..` component; containing `/` (dash-prefixed ones such as
//! `--x/../../etc/shadow` included); naming an existing entry, dangling symlinks
//! included; `~` or `~/…`; a `file:` URL; the value of a long option `--opt=value` or
//! `-o=value`; a compact short option whose value starts with `/`, `.` or `~` (`-C/etc`,
//! `-I../x`). A bare `NAME=value` is a program's own setting — a make variable
//! (`PREFIX=/usr/local`), an environment assignment, a `key=value` configuration — whose
//! value the program does not open as written, so it is **not** a path, with one
//! exception: the keys of programs whose file operands are written as assignments,
//! [`ASSIGNMENT_PATH_KEYS`] (dd's `if=` and `of=`). Two kinds of arguments are text, not
//! accesses, and are skipped: the target operands of `ln -s`/`ln --symbolic` (resolved
//! from the link's directory when used, if ever; [`link_targets`]), and the inline
//! program text of an interpreter's `-c`/`-e` flag (found by the interpreter checks).
//!
//! **What access an argument implies.** Read (to see it: read a file, list a directory,
//! find nothing there), except [`ASSIGNMENT_PATH_KEYS`] that write (`of=`). The check
//! cannot know which of a program's operands it writes (`cp a b`): the kernel refuses a
//! write the model does not allow.
//!
//! **What a refusal says.** Each refusal carries the policy change that lets the same
//! request through ([`PathFix`]): a grant of the path (or of its nearest existing
//! directory, for a path that does not exist yet: grants name existing paths) for a
//! path nothing covers (`scope.path_outside_workspace`); the removal of the
//! `filesystem.deny_read` or `filesystem.protected` entry, or `filesystem.dev_shm =
//! "private"`, for a path the policy hides or protects (`scope.path_denied`). A path no
//! policy key can show has no fix, and its refusal says so: host secrets and Tierbox's
//! own files (`scope.path_secret`); host devices, writes into `/proc`, `/` itself,
//! another user's `~user`, remote `file:` URLs and symlink loops
//! (`scope.path_not_grantable`).

use std::path::{Path, PathBuf};

use crate::access::{Access, AccessModel, Rule};
use crate::plan::{DEV_SHM, FsPlan, PROVIDED_DEVICES, ScratchArg};
use crate::policy::{DevShm, FilesystemPolicy};
use crate::rejection::{ArgAccess, GrantKey, PathFix, PolicyChange, Rejection, Unreachable};
use crate::validate::scope::{OwnPath, reaches_own, resolve_in};

/// Device paths that are the run's own standard streams, whatever the tier: every run may
/// read and write them. `/dev/fd/N` and `/proc/self/fd/N` (N a number) are too.
pub const RUN_STDIO_PATHS: &[&str] = &["/dev/stdin", "/dev/stdout", "/dev/stderr"];

/// The sandbox's private scratch directories: every tier gives the run its own, empty,
/// writable one, so a path in one is the run's (what the host holds there is not seen).
/// A policy grant inside one is seen as granted instead.
pub const SCRATCH_ROOTS: &[&str] = &["/tmp"];

/// The mounts the sandbox makes itself, whose host contents the run does not see: a path
/// under one is resolved lexically, never through the host's symlinks (on the host,
/// `/proc/self` is the supervisor).
pub const SANDBOX_MOUNTS: &[&str] = &["/proc", "/dev"];

/// The keys of a bare `NAME=value` argument whose value is a path, with the access it
/// implies: dd's operands. Every other bare assignment is a program's own setting.
pub const ASSIGNMENT_PATH_KEYS: &[(&str, ArgAccess)] =
    &[("if", ArgAccess::Read), ("of", ArgAccess::Write)];

/// What a run has at `path` that the sandbox provides itself, where the access model
/// (`model`, of the plan's filesystem `fs`) has no rule: `/proc` (read; the run's own
/// `/proc/self/fd/N` read-write), its standard streams and `/dev/fd/N`, the devices every
/// run has ([`PROVIDED_DEVICES`], pseudo-terminals), `/dev` itself (read), `/dev/shm`
/// (read-write when `filesystem.dev_shm = "private"`, else an empty read-only
/// directory), any other device (nothing), and the run's private `/tmp`
/// ([`SCRATCH_ROOTS`]). `None`: the model decides. `path` is as the run names it, not
/// resolved on the host. The argument check and `tierbox explain --path` both use it.
///
/// ```
/// use std::path::Path;
/// use tierbox_policy::access::{Access, AccessModel};
/// use tierbox_policy::plan::FsPlan;
/// use tierbox_policy::validate::sandbox_access;
///
/// let fs = FsPlan::default();
/// let model = AccessModel::new(Path::new("/work/app"), &fs);
/// let at = |p: &str| sandbox_access(&model, &fs, Path::new(p));
/// assert_eq!(at("/proc/cpuinfo"), Some(Access::Read));
/// assert_eq!(at("/tmp/x"), Some(Access::Write));
/// assert_eq!(at("/dev/sda"), Some(Access::None));
/// assert_eq!(at("/srv/data"), None);
/// ```
pub fn sandbox_access(model: &AccessModel, fs: &FsPlan, path: &Path) -> Option<Access> {
    let scratch: Vec<PathBuf> = SCRATCH_ROOTS.iter().map(PathBuf::from).collect();
    provided(model, fs, &scratch, path)
}

/// [`sandbox_access`] with the given scratch roots.
fn provided(model: &AccessModel, fs: &FsPlan, scratch: &[PathBuf], path: &Path) -> Option<Access> {
    if is_run_stdio(path) {
        return Some(Access::Write);
    }
    if path.starts_with("/proc") {
        return Some(Access::Read);
    }
    if model.rule(path).is_some() {
        return None;
    }
    if path.starts_with("/dev") {
        let device =
            PROVIDED_DEVICES.iter().any(|d| path == Path::new(d)) || path.starts_with("/dev/pts");
        return Some(if device {
            Access::Write
        } else if path == Path::new("/dev") {
            Access::Read
        } else if path.starts_with(DEV_SHM) {
            match fs.dev_shm {
                DevShm::Private => Access::Write,
                DevShm::None if path == Path::new(DEV_SHM) => Access::Read,
                DevShm::None => Access::None,
            }
        } else {
            Access::None
        });
    }
    scratch
        .iter()
        .any(|r| path.starts_with(r))
        .then_some(Access::Write)
}

/// Most policy changes one refusal's fix is made of (a denial removed, then a grant).
const MAX_FIX_CHANGES: usize = 4;

/// What the run's `~` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunHome {
    /// A private, empty, writable directory of the run's own.
    Private,
    /// The supervisor's `HOME`, granted by the policy (canonical).
    At(PathBuf),
}

/// What a run sees at a host path: the plan's [`AccessModel`], plus the sandbox's own
/// mounts (see the module documentation), with what is needed to name the policy change
/// that would show a path it does not.
#[derive(Debug, Clone)]
pub(crate) struct Visible<'a> {
    workspace: PathBuf,
    fs: FsPlan,
    model: AccessModel,
    own: &'a [OwnPath],
    scratch: Vec<PathBuf>,
    home: RunHome,
    /// Each canonical `filesystem.deny_read` path with the entry as the policy writes it.
    deny_entries: Vec<(PathBuf, String)>,
    /// Each canonical `filesystem.read_only` grant with the entry as the policy writes it.
    read_only_entries: Vec<(PathBuf, String)>,
    /// The policy's `filesystem.protected` entries.
    protected_entries: Vec<String>,
}

impl<'a> Visible<'a> {
    /// What a run of `fs` (the plan's filesystem, for the canonical `workspace`) sees;
    /// `policy` is the section `fs` came from, `home` the supervisor's `HOME` its `~/`
    /// entries expand to, `own` Tierbox's own files. No scratch roots: see
    /// [`Visible::with_scratch`].
    pub(crate) fn new(
        workspace: &Path,
        fs: &FsPlan,
        policy: &FilesystemPolicy,
        home: Option<&Path>,
        run_home: RunHome,
        own: &'a [OwnPath],
    ) -> Self {
        let expand = |entry: &String| -> Option<(PathBuf, String)> {
            let path = match entry.strip_prefix("~/") {
                Some(rest) => home?.join(rest),
                None => PathBuf::from(entry),
            };
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            Some((path, entry.clone()))
        };
        Self {
            workspace: workspace.to_path_buf(),
            model: AccessModel::new(workspace, fs),
            fs: fs.clone(),
            own,
            scratch: Vec::new(),
            home: run_home,
            deny_entries: policy.deny_read.iter().filter_map(expand).collect(),
            read_only_entries: policy.read_only.iter().filter_map(expand).collect(),
            protected_entries: policy.protected.clone(),
        }
    }

    /// The same with the sandbox's private scratch directories (see [`SCRATCH_ROOTS`]).
    pub(crate) fn with_scratch(mut self, roots: &[&str]) -> Self {
        self.scratch = roots.iter().map(PathBuf::from).collect();
        self
    }

    /// Whether `at` is in one of the run's own scratch directories, which no grant
    /// covers.
    fn in_scratch(&self, at: &Path) -> bool {
        self.scratch.iter().any(|r| at.starts_with(r)) && self.model.rule(at).is_none()
    }

    /// Whether a path is the sandbox's own mount, not looked up on the host.
    fn sandbox_own(&self, at: &Path) -> bool {
        SANDBOX_MOUNTS.iter().any(|m| at.starts_with(m)) || self.in_scratch(at)
    }

    /// Where `path` (relative to `base`) leads for the run.
    fn resolve(&self, base: &Path, path: &Path) -> Result<PathBuf, PathBuf> {
        resolve_in(base, path, &|at| self.sandbox_own(at))
    }

    /// What it would take for the run to have `need` at `path` (resolved).
    fn verdict(&self, path: &Path, need: ArgAccess) -> Verdict {
        let mut view = self.clone();
        let mut changes = Vec::new();
        let mut denied = None;
        for _ in 0..=MAX_FIX_CHANGES {
            match view.step(path, need) {
                Step::Visible if changes.is_empty() => return Verdict::Visible,
                Step::Visible => {
                    return Verdict::Fix {
                        denied,
                        fix: PathFix(changes.into()),
                    };
                }
                Step::Never(why) => return Verdict::Never(why),
                Step::Change { change, rule } => {
                    denied = denied.or(rule);
                    for c in &change {
                        view.apply(c);
                    }
                    changes.extend(change);
                }
            }
        }
        // Not reached with the rules below (each change is never needed twice); fail
        // closed rather than suggest changes that do not suffice.
        Verdict::Never(Unreachable::Unresolvable)
    }

    /// One rule on the way: what decides `path` for `need` now.
    fn step(&self, path: &Path, need: ArgAccess) -> Step {
        let write = need == ArgAccess::Write;
        if let Some(o) = self.own.iter().find(|o| o.holds(path, write)) {
            return Step::Never(o.unreachable());
        }
        if let Some(h) = self.fs.system_hidden.iter().find(|h| path.starts_with(h)) {
            return Step::Never(Unreachable::HostSecret { at: h.clone() });
        }
        let needed = match need {
            ArgAccess::Read => Access::Read,
            ArgAccess::Write => Access::Write,
        };
        if let Some(access) = provided(&self.model, &self.fs, &self.scratch, path) {
            return if access >= needed {
                Step::Visible
            } else if path.starts_with(DEV_SHM) {
                Step::Change {
                    change: vec![PolicyChange::PrivateDevShm],
                    rule: Some(
                        "filesystem.dev_shm = \"none\" leaves /dev/shm empty and read-only"
                            .to_owned(),
                    ),
                }
            } else if path.starts_with("/proc") {
                Step::Never(Unreachable::ProcWrite)
            } else {
                Step::Never(Unreachable::Device)
            };
        }
        match self.model.rule(path) {
            Some((at, Rule::Deny)) => match self.deny_entries.iter().find(|(d, _)| d == at) {
                Some((_, entry)) => Step::Change {
                    change: vec![PolicyChange::RemoveDenial {
                        entry: entry.clone(),
                    }],
                    rule: Some(format!(
                        "filesystem.deny_read {entry:?} hides it (a denial wins over every grant)"
                    )),
                },
                // Carved out of the system roots: a host secret, or Tierbox's own.
                None => Step::Never(Unreachable::HostSecret {
                    at: at.to_path_buf(),
                }),
            },
            Some(_) if self.model.access(path) >= needed => Step::Visible,
            Some((_, Rule::Protected)) => {
                let change: Vec<PolicyChange> = self
                    .protecting(path)
                    .map(|entry| PolicyChange::RemoveProtected { entry })
                    .collect();
                if change.is_empty() {
                    return Step::Never(Unreachable::Unresolvable);
                }
                Step::Change {
                    change,
                    rule: Some("filesystem.protected keeps it read-only".to_owned()),
                }
            }
            Some((at, rule)) => self.grant(path, GrantKey::Writable, Some((at, rule))),
            None => self.grant(
                path,
                match need {
                    ArgAccess::Read => GrantKey::ReadOnly,
                    ArgAccess::Write => GrantKey::Writable,
                },
                None,
            ),
        }
    }

    /// The grant that shows `path`: of it, or of its nearest existing directory.
    fn grant(&self, path: &Path, key: GrantKey, decided: Option<(&Path, Rule)>) -> Step {
        let target = path
            .ancestors()
            .find(|a| std::fs::symlink_metadata(a).is_ok())
            .unwrap_or(Path::new("/"));
        if target == Path::new("/") {
            return Step::Never(Unreachable::Root);
        }
        // A grant that would reach one of Tierbox's own files is refused (`check_grant`).
        if let Some(o) = reaches_own(self.own, target, key == GrantKey::Writable) {
            return Step::Never(o.unreachable());
        }
        if let Some((at, Rule::ReadOnly)) = decided
            && at == target
            && let Some((_, entry)) = self.read_only_entries.iter().find(|(p, _)| p == at)
        {
            return Step::Change {
                change: vec![PolicyChange::MoveToWritable {
                    entry: entry.clone(),
                }],
                rule: None,
            };
        }
        Step::Change {
            change: vec![PolicyChange::Grant {
                key,
                path: target.to_path_buf(),
            }],
            rule: None,
        }
    }

    /// The `filesystem.protected` entries that protect `path`: each one relative to the
    /// workspace, and each `.git` one relative to a nested repository too.
    fn protecting<'s>(&'s self, path: &'s Path) -> impl Iterator<Item = String> + 's {
        self.protected_entries
            .iter()
            .filter(move |entry| {
                let git = entry.as_str() == ".git" || entry.starts_with(".git/");
                std::iter::once(&self.workspace)
                    .chain(self.fs.git_repos.iter().filter(|_| git))
                    .any(|base| path.starts_with(base.join(entry.as_str())))
            })
            .cloned()
    }

    /// The view with `change` applied, as validation would apply it.
    fn apply(&mut self, change: &PolicyChange) {
        let fs = &mut self.fs;
        match change {
            PolicyChange::Grant { key, path } => {
                let (list, roots) = match key {
                    GrantKey::ReadOnly => (&mut fs.read_only, &mut fs.read_only_roots),
                    GrantKey::Writable => (&mut fs.writable, &mut fs.writable_roots),
                };
                list.push(path.clone());
                roots.push(path.clone());
            }
            PolicyChange::RemoveDenial { entry } => {
                let gone: Vec<PathBuf> = self
                    .deny_entries
                    .iter()
                    .filter(|(_, e)| e == entry)
                    .map(|(p, _)| p.clone())
                    .collect();
                fs.deny_read.retain(|d| !gone.contains(d));
                self.deny_entries.retain(|(_, e)| e != entry);
            }
            PolicyChange::RemoveProtected { entry } => {
                let ws = self.workspace.clone();
                let git = entry.as_str() == ".git" || entry.starts_with(".git/");
                let gone: Vec<PathBuf> = std::iter::once(&ws)
                    .chain(fs.git_repos.iter().filter(|_| git))
                    .map(|base| base.join(entry))
                    .collect();
                fs.protected.retain(|p| !gone.contains(p));
                self.protected_entries.retain(|e| e != entry);
            }
            PolicyChange::MoveToWritable { entry } => {
                let moved: Vec<PathBuf> = self
                    .read_only_entries
                    .iter()
                    .filter(|(_, e)| e == entry)
                    .map(|(p, _)| p.clone())
                    .collect();
                for m in &moved {
                    fs.read_only.retain(|p| !p.starts_with(m));
                    fs.read_only_roots.retain(|p| p != m);
                    fs.writable.push(m.clone());
                    fs.writable_roots.push(m.clone());
                }
                self.read_only_entries.retain(|(_, e)| e != entry);
            }
            PolicyChange::PrivateDevShm => fs.dev_shm = DevShm::Private,
        }
        self.model = AccessModel::new(&self.workspace, &self.fs);
    }
}

/// What a run can do at a path, or what it would take.
#[derive(Debug)]
enum Verdict {
    Visible,
    /// These changes show it; `denied` says which policy entry refuses it now.
    Fix {
        denied: Option<String>,
        fix: PathFix,
    },
    /// No policy change shows it.
    Never(Unreachable),
}

/// One rule on the way to a verdict.
#[derive(Debug)]
enum Step {
    Visible,
    Change {
        change: Vec<PolicyChange>,
        /// The policy entry that refuses the path, when one does (rather than none
        /// covering it).
        rule: Option<String>,
    },
    Never(Unreachable),
}

/// Checks every argument that provably names a path (see the module documentation)
/// against what the run sees, relative to `cwd`; the arguments at `skip` are text (link
/// targets, inline program text). Never changes an argument.
///
/// The first refusal is reported, and its fix is the whole request's: the paths after it
/// are judged as if that fix were applied, and what they need is added to it, so that a
/// policy with the fix applied lets the same request through. One path named twice by
/// one argument (`of=x/..` is both a file name and dd's output) is judged once, for the
/// stronger access. A path no policy shows is reported as such even after a fixable one.
pub(crate) fn check_args(
    visible: &Visible<'_>,
    cwd: &Path,
    args: &[String],
    skip: &[usize],
) -> Result<Vec<ScratchArg>, Rejection> {
    let mut scratch = Vec::new();
    let mut view = visible.clone();
    let mut first: Option<Rejection> = None;
    let mut more = Vec::new();
    for (arg_index, arg) in args.iter().enumerate() {
        if skip.contains(&arg_index) {
            continue;
        }
        let mut judged: Vec<(PathBuf, ArgAccess, Option<Verdict>)> = Vec::new();
        for candidate in candidates(arg, cwd) {
            let (base, path, access) = match candidate {
                Candidate::Never { shown, why } => {
                    judged.push((shown, ArgAccess::Read, Some(Verdict::Never(why))));
                    continue;
                }
                Candidate::Home { rest, access } => match &view.home {
                    RunHome::Private => continue,
                    RunHome::At(home) => (home.clone(), rest, access),
                },
                Candidate::Path { path, access } => (cwd.to_path_buf(), path, access),
            };
            match view.resolve(&base, &path) {
                Ok(resolved) => match judged
                    .iter_mut()
                    .find(|(p, _, v)| v.is_none() && *p == resolved)
                {
                    Some(seen) => seen.1 = seen.1.max(access),
                    None => judged.push((resolved, access, None)),
                },
                Err(reached) => judged.push((
                    reached,
                    access,
                    Some(Verdict::Never(Unreachable::Unresolvable)),
                )),
            }
        }
        for (resolved, access, verdict) in judged {
            let verdict = verdict.unwrap_or_else(|| view.verdict(&resolved, access));
            // Seen only as the run's own /tmp: what a launch without one must refuse.
            if matches!(verdict, Verdict::Visible) && visible.in_scratch(&resolved) {
                scratch.push(ScratchArg {
                    arg_index,
                    arg: arg.clone(),
                    resolved: resolved.clone(),
                });
            }
            if let Verdict::Fix { fix, .. } = &verdict {
                for change in fix.changes() {
                    view.apply(change);
                }
                if first.is_some() {
                    more.extend(fix.changes().iter().cloned());
                    continue;
                }
            }
            if let Some(rejection) = refusal(visible, arg_index, arg, resolved, access, verdict) {
                if matches!(
                    rejection,
                    Rejection::PathSecret { .. } | Rejection::PathNotGrantable { .. }
                ) {
                    return Err(rejection);
                }
                first = Some(rejection);
            }
        }
    }
    match first {
        None => Ok(scratch),
        Some(mut rejection) => {
            if let Rejection::PathOutsideWorkspace { fix, .. } | Rejection::PathDenied { fix, .. } =
                &mut rejection
            {
                fix.extend(more);
            }
            Err(rejection)
        }
    }
}

/// The rejection of argument `arg_index` (`arg`), which names `resolved`, for its
/// `verdict`; `None` when the run sees it.
fn refusal(
    visible: &Visible<'_>,
    arg_index: usize,
    arg: &str,
    resolved: PathBuf,
    access: ArgAccess,
    verdict: Verdict,
) -> Option<Rejection> {
    let arg = arg.to_owned();
    Some(match verdict {
        Verdict::Visible => return None,
        Verdict::Fix { denied: None, fix } => Rejection::PathOutsideWorkspace {
            arg_index,
            arg,
            resolved,
            workspace: visible.workspace.clone(),
            access,
            fix,
        },
        Verdict::Fix {
            denied: Some(rule),
            fix,
        } => Rejection::PathDenied {
            arg_index,
            arg,
            resolved,
            access,
            rule,
            fix,
        },
        Verdict::Never(why @ (Unreachable::HostSecret { .. } | Unreachable::Own { .. })) => {
            Rejection::PathSecret {
                arg_index,
                arg,
                resolved,
                why,
            }
        }
        Verdict::Never(why) => Rejection::PathNotGrantable {
            arg_index,
            arg,
            resolved,
            access,
            why,
        },
    })
}

/// The indices of `ln`'s arguments that are symlink targets when it makes symbolic
/// links (`-s`, `--symbolic`, in a cluster such as `-sf`): text stored in the link, not
/// a path opened now. With `-t DIR`/`--target-directory` every operand is a target;
/// otherwise one operand is, or all but the last (the link's name, or the directory it
/// is made in, which is checked). Only `ln` run as the command itself is read this way.
pub(crate) fn link_targets(command: &str, program: &Path, args: &[String]) -> Vec<usize> {
    let is_ln = |p: &Path| p.file_name().is_some_and(|n| n == "ln");
    if !is_ln(Path::new(command)) && !is_ln(program) {
        return Vec::new();
    }
    let (mut symbolic, mut target_dir) = (false, false);
    let mut operands = Vec::new();
    let mut words = args.iter().enumerate();
    let mut options = true;
    while let Some((i, word)) = words.next() {
        if !options || word == "-" || !word.starts_with('-') {
            operands.push(i);
            continue;
        }
        if word == "--" {
            options = false;
            continue;
        }
        if let Some(long) = word.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            match name {
                "symbolic" => symbolic = true,
                "target-directory" => {
                    target_dir = true;
                    if !attached {
                        words.next();
                    }
                }
                "suffix" if !attached => {
                    words.next();
                }
                _ => {}
            }
            continue;
        }
        // A cluster of short options; `t` and `S` take the rest, else the next word.
        for (at, letter) in word.char_indices().skip(1) {
            match letter {
                's' => symbolic = true,
                't' | 'S' => {
                    target_dir |= letter == 't';
                    if at + 1 == word.len() {
                        words.next();
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    if !symbolic {
        return Vec::new();
    }
    match operands.split_last() {
        Some((_, targets)) if !target_dir && !targets.is_empty() => targets.to_vec(),
        _ => operands,
    }
}

/// A path an argument names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Candidate {
    /// A filesystem path, absolute or relative to the cwd, and what the argument asks
    /// of it.
    Path { path: PathBuf, access: ArgAccess },
    /// `~` or `~/rest`: in the run's home.
    Home { rest: PathBuf, access: ArgAccess },
    /// A place no policy shows (`~user/…`, a `file:` URL on another host), as written.
    Never { shown: PathBuf, why: Unreachable },
}

/// Every path `arg` provably names: the argument itself, and the value of an option or
/// assignment it carries.
fn candidates(arg: &str, cwd: &Path) -> Vec<Candidate> {
    let mut out = Vec::new();
    classify(arg, ArgAccess::Read, cwd, &mut out);
    if let Some(value) = compact_value(arg) {
        classify(value, ArgAccess::Read, cwd, &mut out);
    }
    out
}

/// Adds the candidate `text` is, if it is one, then looks into its `=value`.
fn classify(text: &str, access: ArgAccess, cwd: &Path, out: &mut Vec<Candidate>) {
    if let Some(candidate) = as_path(text, access, cwd) {
        out.push(candidate);
    }
    if let Some((value, access)) = assigned_value(text) {
        classify(value, access, cwd, out);
    }
}

/// The candidate a word is on its own, if it provably names a path.
fn as_path(text: &str, access: ArgAccess, cwd: &Path) -> Option<Candidate> {
    if text.is_empty() {
        return None;
    }
    if let Some(home) = home_of(text) {
        return Some(match home {
            Some(rest) => Candidate::Home {
                rest: PathBuf::from(rest),
                access,
            },
            None => Candidate::Never {
                shown: PathBuf::from(text),
                why: Unreachable::OtherHome,
            },
        });
    }
    if let Some(candidate) = file_url(text, access) {
        return Some(candidate);
    }
    let provably =
        text.starts_with('/') || text.contains('/') || has_dotdot(text) || exists(&cwd.join(text));
    provably.then(|| Candidate::Path {
        path: PathBuf::from(text),
        access,
    })
}

/// `~`, `~/x` (`Some(Some(rest))`), `~user/x` (`Some(None)`): a home directory, which a
/// program that expands `~` reads; `None` for any other word.
fn home_of(text: &str) -> Option<Option<&str>> {
    let rest = text.strip_prefix('~')?;
    if rest.is_empty() {
        return Some(Some(""));
    }
    if let Some(rest) = rest.strip_prefix('/') {
        return Some(Some(rest));
    }
    let (user, _) = rest.split_once('/')?;
    user.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .then_some(None)
}

/// A `file:` URL's path (percent-decoded), or one no policy shows for one on another
/// host.
fn file_url(text: &str, access: ArgAccess) -> Option<Candidate> {
    if !text
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("file:"))
    {
        return None;
    }
    let url = url::Url::parse(text)
        .ok()
        .filter(|u| u.scheme() == "file")?;
    Some(match url.to_file_path() {
        Ok(path) => Candidate::Path { path, access },
        Err(()) => Candidate::Never {
            shown: PathBuf::from(text),
            why: Unreachable::RemoteFile,
        },
    })
}

fn has_dotdot(text: &str) -> bool {
    text.split('/').any(|c| c == "..")
}

/// Whether an entry exists at `path`, a dangling symlink included.
fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The value of an option or assignment that names a path, with the access it implies:
/// `--opt=value` and `-o=value` (an option's value, read), and `NAME=value` for a key in
/// [`ASSIGNMENT_PATH_KEYS`]. The key holds no `/`, so the `=` inside a URL's query is
/// not taken for one; any other bare `NAME=value` is a setting, not a path.
fn assigned_value(text: &str) -> Option<(&str, ArgAccess)> {
    let (key, value) = text.split_once('=')?;
    if value.is_empty() || key.contains('/') {
        return None;
    }
    if let Some(long) = key.strip_prefix("--") {
        return (!long.is_empty()).then_some((value, ArgAccess::Read));
    }
    if let Some(short) = key.strip_prefix('-') {
        let mut letters = short.chars();
        let one = letters.next().is_some() && letters.next().is_none();
        return one.then_some((value, ArgAccess::Read));
    }
    ASSIGNMENT_PATH_KEYS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, access)| (value, *access))
}

/// The value of a compact short option whose value looks like a path: a single dash,
/// one letter, then a value starting with `/`, `.` or `~` (`-C/etc`, `-I../x`, `-o/abs`).
fn compact_value(arg: &str) -> Option<&str> {
    let rest = arg.strip_prefix('-')?;
    let mut chars = rest.chars();
    let letter = chars.next()?;
    let value = chars.as_str();
    (letter.is_ascii_alphabetic() && value.starts_with(['/', '.', '~'])).then_some(value)
}

/// Whether `path` is one of the run's own standard streams or file descriptors.
fn is_run_stdio(path: &Path) -> bool {
    let Some(text) = path.to_str() else {
        return false;
    };
    let numbered = |prefix: &str| {
        text.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    RUN_STDIO_PATHS.contains(&text) || numbered("/dev/fd/") || numbered("/proc/self/fd/")
}

#[cfg(test)]
#[path = "arg_paths_tests.rs"]
mod tests;
