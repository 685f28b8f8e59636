//! How a run's filesystem grants compose: one model, computed from a [`Plan`], of what a
//! run may do at any host path, and of where a tier carries it out differently.
//!
//! The rules, for a path `p`:
//!
//! 1. **Denial wins.** If `p` is a `deny_read` path or lies below one, the run can do
//!    nothing there: not read, not write, not create (Tier C shows an empty read-only
//!    directory or an unopenable file in its place).
//! 2. Otherwise **the most specific grant wins**: of the grants that are `p` or one of its
//!    ancestors, the deepest decides. A read-only grant inside a writable one is
//!    read-only; a writable grant inside a read-only one is writable. On one path a
//!    narrower grant beats a wider one: protected (read-only, inside the workspace) over
//!    read-only over the workspace and writable grants over the system paths.
//! 3. A path no grant covers is absent for the run.
//! 4. **Writes reach the host.** Where the model says writable, a file written or created
//!    there is on the host after the run; no tier may turn a granted directory into a
//!    private copy. A tier that cannot carry a part of the model out refuses to write
//!    there (the write fails with `EACCES`/`EROFS`), it never pretends.
//!
//! Where the tiers differ ([`AccessModel::tier_b_sealed`]): Tier B's landlock can only
//! grant, never subtract, so a writable grant that contains a narrower path (denied or
//! read-only) is granted entry by entry around it. The directories on the way down to the
//! narrower path then accept no new entries and no deletions or renames in Tier B (their
//! existing entries keep their access); Tier C binds the grant whole and covers the
//! narrower path, so they work there.
//!
//! The model does not cover the sandbox's own mounts (`/tmp`, `/dev`, `/proc` in Tier C,
//! the private `TMPDIR` in Tier B), which are the run's scratch space and never reach the
//! host.

use std::path::{Path, PathBuf};

use crate::plan::{FsPlan, Plan};

/// What a run may do with an existing path, and in it when it is a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Nothing: the path is absent or hidden.
    None,
    /// Read (list a directory, read a file).
    Read,
    /// Read and write; in a directory also create, delete and rename entries.
    Write,
}

/// Which rule decides a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A system path (`/usr`, `/etc`, …): read-only.
    System,
    /// A `filesystem.writable` grant.
    Writable,
    /// The workspace.
    Workspace,
    /// A `filesystem.read_only` grant.
    ReadOnly,
    /// A protected path inside the workspace: read-only.
    Protected,
    /// A `deny_read` path: hidden.
    Deny,
}

impl Rule {
    /// The policy key a rule comes from, for a rule that comes from one.
    pub fn policy_key(self) -> Option<&'static str> {
        match self {
            Rule::Writable => Some("filesystem.writable"),
            Rule::ReadOnly => Some("filesystem.read_only"),
            Rule::Protected => Some("filesystem.protected"),
            Rule::Deny => Some("filesystem.deny_read"),
            Rule::System | Rule::Workspace => None,
        }
    }

    fn access(self) -> Access {
        match self {
            Rule::System | Rule::ReadOnly | Rule::Protected => Access::Read,
            Rule::Writable | Rule::Workspace => Access::Write,
            Rule::Deny => Access::None,
        }
    }
}

/// The composed grants of a Plan.
#[derive(Debug, Clone)]
pub struct AccessModel {
    /// Every grant and denial with its rule.
    rules: Vec<(PathBuf, Rule)>,
}

impl AccessModel {
    /// The model of `plan`'s filesystem: its system paths (whole), read-only and writable
    /// grants (whole, as the policy names them), workspace, protected and denied paths.
    ///
    /// ```
    /// use std::path::{Path, PathBuf};
    /// use tierbox_policy::access::{Access, AccessModel};
    /// let mut fs = tierbox_policy::plan::FsPlan::default();
    /// fs.writable_roots = vec![PathBuf::from("/cache")];
    /// fs.deny_read = vec![PathBuf::from("/cache/credentials")];
    /// let model = AccessModel::new(Path::new("/work/app"), &fs);
    /// assert_eq!(model.access(Path::new("/cache/new-file")), Access::Write);
    /// assert_eq!(model.access(Path::new("/cache/credentials/token")), Access::None);
    /// // Tier B cannot create at the top of the cache: its landlock grants the entries.
    /// assert_eq!(model.tier_b_sealed(), [PathBuf::from("/cache")]);
    /// ```
    pub fn of(plan: &Plan) -> Self {
        Self::new(&plan.workspace, &plan.filesystem)
    }

    /// The model of a workspace and a filesystem plan (see [`AccessModel::of`]).
    pub fn new(workspace: &Path, fs: &FsPlan) -> Self {
        let mut rules: Vec<(PathBuf, Rule)> = Vec::new();
        rules.extend(fs.system_binds().iter().map(|p| (p.clone(), Rule::System)));
        rules.extend(fs.system_covers().iter().map(|p| (p.clone(), Rule::Deny)));
        rules.extend(
            fs.writable_binds()
                .iter()
                .map(|p| (p.clone(), Rule::Writable)),
        );
        rules.push((workspace.to_path_buf(), Rule::Workspace));
        rules.extend(
            fs.read_only_binds()
                .iter()
                .map(|p| (p.clone(), Rule::ReadOnly)),
        );
        rules.extend(fs.protected.iter().map(|p| (p.clone(), Rule::Protected)));
        rules.extend(fs.deny_read.iter().map(|p| (p.clone(), Rule::Deny)));
        Self { rules }
    }

    /// The rule that decides `path`, and the path it is attached to.
    pub fn rule(&self, path: &Path) -> Option<(&Path, Rule)> {
        if let Some((p, r)) = self
            .rules
            .iter()
            .filter(|(p, r)| *r == Rule::Deny && path.starts_with(p))
            .min_by_key(|(p, _)| p.components().count())
        {
            return Some((p.as_path(), *r));
        }
        self.rules
            .iter()
            .filter(|(p, _)| path.starts_with(p))
            .max_by_key(|(p, r)| (p.components().count(), *r))
            .map(|(p, r)| (p.as_path(), *r))
    }

    /// What the run may do with `path` (and, for a directory, in it).
    pub fn access(&self, path: &Path) -> Access {
        self.rule(path).map_or(Access::None, |(_, r)| r.access())
    }

    /// The directories Tier B cannot carry out as the model says, because its landlock
    /// grants the entries of a grant one by one around a narrower path inside it: a
    /// writable grant and its directories down to, not including, each read-only or
    /// denied path inside it; a read-only grant and its directories down to each denied
    /// path. In Tier B such a directory cannot be listed, and accepts no new entries,
    /// deletions or renames; its existing entries keep their access. In Tier C they work.
    pub fn tier_b_sealed(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for (root, rule) in &self.rules {
            let narrower_rules: &[Rule] = match rule {
                Rule::Writable => &[Rule::Deny, Rule::ReadOnly],
                Rule::ReadOnly => &[Rule::Deny],
                _ => continue,
            };
            for (narrow, nrule) in &self.rules {
                if !narrower_rules.contains(nrule) || narrow == root || !narrow.starts_with(root) {
                    continue;
                }
                // Only where this grant decides the directory.
                let mut dir = narrow.parent();
                while let Some(d) = dir {
                    if !d.starts_with(root) {
                        break;
                    }
                    let decided = self.rule(d).is_some_and(|(p, r)| p == root && r == *rule);
                    if decided && !out.iter().any(|o| o == d) {
                        out.push(d.to_path_buf());
                    }
                    dir = d.parent();
                }
            }
        }
        out.sort();
        out
    }
}

/// Which symlinks found while carving become grants of their own. A landlock rule on a
/// symlink is a rule on its target, wherever that is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// None (a policy's grants): reading through a link works where its target is
    /// granted anyway, and a link must not grant what it points at (a denied file, or
    /// `/etc/shadow`).
    Never,
    /// Those whose target is not hidden (the system paths, root's own: `/etc/localtime`,
    /// `/etc/alternatives/*`, a `resolv.conf` in `/run`).
    UnlessHidden,
}

/// Carves `narrower` paths out of `grants` for a tier that can only grant: each grant that
/// contains one is replaced by its entries (recursively), except the narrower paths
/// themselves and what is below them, and symlinks as `links` says. Reads the host
/// (directory listings).
pub(crate) fn carve(grants: &[PathBuf], narrower: &[PathBuf], links: Links) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for g in grants {
        expand_without(g, narrower, links, &mut out);
    }
    out
}

fn expand_without(path: &Path, hidden: &[PathBuf], links: Links, out: &mut Vec<PathBuf>) {
    if hidden.iter().any(|h| h == path) {
        return;
    }
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.file_type().is_symlink() {
        let keep = links == Links::UnlessHidden
            && std::fs::canonicalize(path).is_ok_and(|t| !hidden.iter().any(|h| t.starts_with(h)));
        if keep {
            out.push(path.to_path_buf());
        }
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(path)) {
        out.push(path.to_path_buf());
        return;
    }
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        expand_without(&entry.path(), hidden, links, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs() -> FsPlan {
        FsPlan {
            system_roots: vec![PathBuf::from("/usr")].into(),
            writable_roots: vec![PathBuf::from("/c"), PathBuf::from("/r/w")],
            read_only_roots: vec![PathBuf::from("/r"), PathBuf::from("/c/ro")],
            deny_read: vec![PathBuf::from("/c/d"), PathBuf::from("/w/secret")],
            protected: vec![PathBuf::from("/w/.git")],
            ..FsPlan::default()
        }
    }

    fn model(fs: &FsPlan) -> AccessModel {
        AccessModel::new(Path::new("/w"), fs)
    }

    /// Carving never turns a symlink into a grant: a rule on it would grant its target.
    /// Regression: with `~/.cargo` read-only and its `credentials.toml` (a symlink to
    /// `real/creds`) denied, Tier B granted the link, and so the secret behind it.
    #[test]
    fn carving_never_grants_a_symlink() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tools = dir.path().join("tools");
        std::fs::create_dir_all(tools.join("real")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(tools.join("real/creds"), "secret").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(tools.join("README"), "x").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("real/creds", tools.join("credentials.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let carved = carve(
            std::slice::from_ref(&tools),
            &[tools.join("real/creds")],
            Links::Never,
        );
        assert_eq!(carved, [tools.join("README")]);
        let system = carve(
            std::slice::from_ref(&tools),
            &[tools.join("real/creds")],
            Links::UnlessHidden,
        );
        assert_eq!(
            system,
            [tools.join("README")],
            "a link to a hidden file is not kept"
        );
    }

    #[test]
    fn denial_wins_then_the_deepest_grant() {
        let m = model(&fs());
        let at = |p: &str| m.access(Path::new(p));
        assert_eq!(at("/c/new"), Access::Write);
        assert_eq!(at("/c/d"), Access::None);
        assert_eq!(at("/c/d/x/y"), Access::None);
        assert_eq!(at("/c/ro/f"), Access::Read);
        assert_eq!(at("/r/f"), Access::Read);
        assert_eq!(at("/r/w/f"), Access::Write);
        assert_eq!(at("/w/src/main.rs"), Access::Write);
        assert_eq!(at("/w/.git/config"), Access::Read);
        assert_eq!(at("/w/secret"), Access::None);
        assert_eq!(at("/usr/bin/env"), Access::Read);
        assert_eq!(at("/etc/passwd"), Access::None);
        assert_eq!(at("/home"), Access::None);
    }

    #[test]
    fn tier_b_seals_the_levels_above_a_narrower_path() {
        let m = model(&fs());
        assert_eq!(m.tier_b_sealed(), [PathBuf::from("/c")]);
        let mut ro = fs();
        ro.deny_read.push(PathBuf::from("/r/x/secret"));
        assert_eq!(
            model(&ro).tier_b_sealed(),
            [
                PathBuf::from("/c"),
                PathBuf::from("/r"),
                PathBuf::from("/r/x")
            ]
        );
        let mut deep = fs();
        deep.deny_read = vec![PathBuf::from("/c/a/b/d")];
        deep.read_only_roots.clear();
        assert_eq!(
            model(&deep).tier_b_sealed(),
            [
                PathBuf::from("/c"),
                PathBuf::from("/c/a"),
                PathBuf::from("/c/a/b")
            ]
        );
    }
}
