//! Named host sockets a run may connect to (`egress.unix_sockets`): an ssh agent, a
//! database's socket, a model server's.
//!
//! An entry is an absolute path, or a variable of the environment of the process that
//! runs Tierbox — `"$SSH_AUTH_SOCK"`, `"${XDG_RUNTIME_DIR}/pulse/native"` — expanded when a
//! request is validated: the CLI's own environment, a server's environment as it was
//! started (never a request's `env`, which would let a caller choose the path). Each
//! resolves, symlinks followed, to an existing socket, which Tier C binds read-only into
//! the sandbox at its resolved path, and nothing else: the host's `/tmp`, `/run` and home
//! directories are not in the sandbox, nor are abstract sockets (they belong to the
//! host's network namespace). An entry that is exactly a variable sets that variable in
//! the run's environment to the path, so `ssh`, `git push` and `ssh-add` find the agent.
//!
//! Sockets that hand whoever connects control of the host — a container engine's,
//! systemd's manager, the system bus — are refused unless the policy sets
//! `egress.danger_privileged_sockets = true`; `check` and the outcome then warn.
//!
//! ```
//! use tierbox_policy::unix_sockets::{SocketEntry, is_privileged_socket};
//! use std::path::Path;
//!
//! let e: SocketEntry = "$SSH_AUTH_SOCK".parse().unwrap();
//! assert_eq!(e.variable(), Some("SSH_AUTH_SOCK"));
//! assert!("relative/agent.sock".parse::<SocketEntry>().is_err());
//! assert!(is_privileged_socket(Path::new("/var/run/docker.sock")));
//! assert!(is_privileged_socket(Path::new("/home/dev/.docker/run/docker.sock")));
//! assert!(!is_privileged_socket(Path::new("/tmp/ssh-XXXX/agent.42")));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most entries in `egress.unix_sockets`: each is a bind mount in the sandbox (and an
/// inherited descriptor of bwrap's).
pub const MAX_UNIX_SOCKETS: usize = 8;

/// Longest entry, in bytes: a socket's path is at most 108 bytes (`sun_path`), so
/// anything much longer cannot name one.
pub const MAX_SOCKET_ENTRY_BYTES: usize = 256;

/// Host sockets whose peer gets control of the host (`*` is one path component): a
/// container engine runs any container as root, systemd's private socket and the
/// system bus start and stop services. Each is reachable only with
/// `egress.danger_privileged_sockets`. The container backends never mount one either.
pub const PRIVILEGED_SOCKETS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman/podman.sock",
    "/var/run/podman/podman.sock",
    "/run/user/*/podman/podman.sock",
    "/run/user/*/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/run/buildkit/buildkitd.sock",
    "/run/libvirt/libvirt-sock",
    "/run/incus/unix.socket",
    "/var/snap/lxd/common/lxd/unix.socket",
    "/run/snapd.socket",
    "/run/systemd/private",
    "/run/systemd/userdb/io.systemd.DynamicUser",
    "/run/dbus/system_bus_socket",
    "/var/run/dbus/system_bus_socket",
];

/// File names that mark an engine's control socket wherever it is (a rootless engine's
/// socket in a home directory or a runtime directory).
pub const PRIVILEGED_SOCKET_NAMES: &[&str] = &[
    "docker.sock",
    "podman.sock",
    "containerd.sock",
    "crio.sock",
    "buildkitd.sock",
    "libvirt-sock",
    "cri-dockerd.sock",
];

/// Whether `path` is one of [`PRIVILEGED_SOCKETS`] or has one of the
/// [`PRIVILEGED_SOCKET_NAMES`].
pub fn is_privileged_socket(path: &Path) -> bool {
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| PRIVILEGED_SOCKET_NAMES.contains(&n));
    named || PRIVILEGED_SOCKETS.iter().any(|p| pattern_matches(p, path))
}

/// Whether `path` matches `pattern`, where `*` is exactly one path component.
fn pattern_matches(pattern: &str, path: &Path) -> bool {
    let want: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    let have: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    want.len() == have.len() && want.iter().zip(&have).all(|(w, h)| *w == "*" || *h == *w)
}

/// One `egress.unix_sockets` entry, parsed: a variable (and a path under its value) or
/// an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketEntry {
    variable: Option<String>,
    /// After the variable (`/pulse/native`, or empty), or the whole absolute path.
    rest: String,
}

/// Why an `egress.unix_sockets` entry is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocketEntryError {
    /// Neither a variable nor an absolute path.
    #[error("write an absolute path or a variable ($SSH_AUTH_SOCK, ${{XDG_RUNTIME_DIR}}/name)")]
    Shape,
    /// A variable name that is not `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("{0:?} is not a variable name")]
    Variable(String),
    /// A `..` or `.` component, or an empty one.
    #[error("the path may not hold '.', '..' or '//'")]
    Component,
    /// Longer than [`MAX_SOCKET_ENTRY_BYTES`].
    #[error("longer than {MAX_SOCKET_ENTRY_BYTES} bytes")]
    TooLong,
}

/// Why an entry's variable gives no path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// Not set (or empty).
    #[error(
        "${0} is not set in the environment of the tierbox process (the CLI's, or the server's when it started)"
    )]
    Unset(String),
    /// Set to a relative path.
    #[error("${name} is {value:?}, not an absolute path")]
    NotAbsolute {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
    },
}

impl SocketEntry {
    /// The variable the entry starts with, if any.
    pub fn variable(&self) -> Option<&str> {
        self.variable.as_deref()
    }

    /// The variable when the entry is exactly one (`"$SSH_AUTH_SOCK"`): the run's
    /// environment gets it, set to the socket's path.
    pub fn sole_variable(&self) -> Option<&str> {
        self.variable.as_deref().filter(|_| self.rest.is_empty())
    }

    /// The host path the entry names, with variables taken from `env`.
    pub fn expand(&self, env: &BTreeMap<String, String>) -> Result<PathBuf, ExpandError> {
        let Some(name) = &self.variable else {
            return Ok(PathBuf::from(&self.rest));
        };
        match env.get(name).filter(|v| !v.is_empty()) {
            None => Err(ExpandError::Unset(name.clone())),
            Some(value) if !value.starts_with('/') => Err(ExpandError::NotAbsolute {
                name: name.clone(),
                value: value.clone(),
            }),
            Some(value) => Ok(PathBuf::from(format!("{value}{}", self.rest))),
        }
    }
}

impl FromStr for SocketEntry {
    type Err = SocketEntryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_SOCKET_ENTRY_BYTES {
            return Err(SocketEntryError::TooLong);
        }
        let (variable, rest) = match s.strip_prefix('$') {
            None if s.starts_with('/') => (None, s),
            None => return Err(SocketEntryError::Shape),
            Some(braced) if braced.starts_with('{') => {
                let Some((name, rest)) = braced[1..].split_once('}') else {
                    return Err(SocketEntryError::Shape);
                };
                (Some(name), rest)
            }
            Some(bare) => {
                let end = bare.find('/').unwrap_or(bare.len());
                (Some(&bare[..end]), &bare[end..])
            }
        };
        if let Some(name) = variable {
            let mut chars = name.chars();
            let first_ok = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(SocketEntryError::Variable(name.to_owned()));
            }
            if !rest.is_empty() && !rest.starts_with('/') {
                return Err(SocketEntryError::Shape);
            }
        }
        let parts: Vec<&str> = rest.split('/').skip(1).collect();
        let bad = |p: &&str| p.is_empty() || *p == "." || *p == ".." || p.contains('\0');
        if (variable.is_none() && rest == "/") || (!rest.is_empty() && parts.iter().any(bad)) {
            return Err(SocketEntryError::Component);
        }
        Ok(Self {
            variable: variable.map(str::to_owned),
            rest: rest.to_owned(),
        })
    }
}

impl fmt::Display for SocketEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.variable {
            Some(name) => write!(f, "${{{name}}}{}", self.rest),
            None => f.write_str(&self.rest),
        }
    }
}

/// Checks an `egress.unix_sockets` list at load: bounded, each entry well formed and
/// listed once. Returns the first bad entry and why.
pub fn check_entries(entries: &[String]) -> Result<(), (String, String)> {
    if entries.len() > MAX_UNIX_SOCKETS {
        return Err((
            format!("{} entries", entries.len()),
            format!("at most {MAX_UNIX_SOCKETS}"),
        ));
    }
    for (i, entry) in entries.iter().enumerate() {
        entry
            .parse::<SocketEntry>()
            .map_err(|e| (entry.clone(), e.to_string()))?;
        if entries[..i].contains(entry) {
            return Err((entry.clone(), "listed twice".to_owned()));
        }
    }
    Ok(())
}

/// A host socket a run may connect to, as the plan carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixSocketGrant {
    /// The policy entry it comes from (`$SSH_AUTH_SOCK`).
    pub entry: String,
    /// The socket, symlinks resolved: where Tier C binds it.
    pub path: PathBuf,
    /// The variable the run's environment gets, set to `path` (entries that are exactly
    /// a variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variable: Option<String>,
    /// The socket's owner and group on the host, and its permission bits: connecting
    /// needs write permission on it, judged by the sandbox's host uid.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// See `uid`.
    pub mode: u32,
    /// The socket's device and inode when validated: the launcher binds exactly this one.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// One of [`PRIVILEGED_SOCKETS`] (allowed by `egress.danger_privileged_sockets`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
}

impl UnixSocketGrant {
    /// Whether a process of host uid `uid` (and only the groups `gids`) may connect:
    /// write permission on the socket, as the kernel decides it (uid 0 always).
    pub fn connectable_by(&self, uid: u32, gids: &[u32]) -> bool {
        uid == 0
            || (self.uid == uid && self.mode & 0o200 != 0)
            || (self.uid != uid && gids.contains(&self.gid) && self.mode & 0o020 != 0)
            || (self.uid != uid && !gids.contains(&self.gid) && self.mode & 0o002 != 0)
    }
}

/// Why an entry cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketRefusal {
    /// Unset variable, missing path, not a socket, denied by the policy.
    Unusable {
        /// The entry.
        entry: String,
        /// Why.
        reason: String,
    },
    /// A [`PRIVILEGED_SOCKETS`] entry without `egress.danger_privileged_sockets`.
    Privileged {
        /// The entry.
        entry: String,
        /// The socket it resolves to.
        path: PathBuf,
    },
}

/// Resolves the policy's entries on this host: each expanded from `env`, resolved
/// (symlinks followed), an existing socket outside `deny_read`, and privileged only when
/// `danger` allows it. A host without unix sockets (Windows) refuses every entry.
#[cfg(not(unix))]
pub fn resolve(
    entries: &[String],
    _danger: bool,
    _env: &BTreeMap<String, String>,
    _deny_read: &[PathBuf],
) -> Result<Vec<UnixSocketGrant>, SocketRefusal> {
    match entries.first() {
        None => Ok(Vec::new()),
        Some(entry) => Err(SocketRefusal::Unusable {
            entry: entry.clone(),
            reason: "this host has no unix sockets".to_owned(),
        }),
    }
}

/// Resolves the policy's entries on this host: each expanded from `env`, resolved
/// (symlinks followed), an existing socket outside `deny_read`, and privileged only when
/// `danger` allows it.
#[cfg(unix)]
pub fn resolve(
    entries: &[String],
    danger: bool,
    env: &BTreeMap<String, String>,
    deny_read: &[PathBuf],
) -> Result<Vec<UnixSocketGrant>, SocketRefusal> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut grants: Vec<UnixSocketGrant> = Vec::with_capacity(entries.len());
    for entry in entries {
        let unusable = |reason: String| SocketRefusal::Unusable {
            entry: entry.clone(),
            reason,
        };
        let parsed: SocketEntry = entry
            .parse()
            .map_err(|e: SocketEntryError| unusable(e.to_string()))?;
        let named = parsed.expand(env).map_err(|e| unusable(e.to_string()))?;
        let path = std::fs::canonicalize(&named)
            .map_err(|e| unusable(format!("{}: {e}", named.display())))?;
        let meta =
            std::fs::metadata(&path).map_err(|e| unusable(format!("{}: {e}", path.display())))?;
        if !meta.file_type().is_socket() {
            return Err(unusable(format!("{} is not a socket", path.display())));
        }
        if let Some(d) = deny_read.iter().find(|d| path.starts_with(d)) {
            return Err(unusable(format!(
                "{} is under filesystem.deny_read {}",
                path.display(),
                d.display()
            )));
        }
        let privileged = is_privileged_socket(&named) || is_privileged_socket(&path);
        if privileged && !danger {
            return Err(SocketRefusal::Privileged {
                entry: entry.clone(),
                path,
            });
        }
        if grants.iter().any(|g| g.path == path) {
            return Err(unusable(format!(
                "{} is also another entry's socket",
                path.display()
            )));
        }
        grants.push(UnixSocketGrant {
            entry: entry.clone(),
            variable: parsed.sole_variable().map(str::to_owned),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
            dev: meta.dev(),
            ino: meta.ino(),
            privileged,
            path,
        });
    }
    Ok(grants)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn entries_are_variables_or_absolute_paths() {
        let ok = |s: &str| s.parse::<SocketEntry>().unwrap();
        assert_eq!(ok("$SSH_AUTH_SOCK").sole_variable(), Some("SSH_AUTH_SOCK"));
        assert_eq!(ok("${XDG_RUNTIME_DIR}/pulse/native").sole_variable(), None);
        assert_eq!(ok("$A/b").variable(), Some("A"));
        assert_eq!(ok("/run/user/1000/bus").variable(), None);
        assert_eq!(ok("${A}/b").to_string(), "${A}/b");
        for bad in [
            "", "relative", "$", "$1A", "${A", "${A}b", "$A-b", "/", "/a/../b", "/a//b", "$A/./b",
            "/a/",
        ] {
            assert!(bad.parse::<SocketEntry>().is_err(), "{bad:?}");
        }
        let long = format!("/{}", "a".repeat(MAX_SOCKET_ENTRY_BYTES));
        assert_eq!(long.parse::<SocketEntry>(), Err(SocketEntryError::TooLong));
    }

    #[test]
    fn expansion_reads_only_the_given_environment() {
        let env: BTreeMap<String, String> = [
            ("SOCK".to_owned(), "/tmp/a.sock".to_owned()),
            ("REL".to_owned(), "tmp/a.sock".to_owned()),
        ]
        .into();
        let e: SocketEntry = "$SOCK".parse().unwrap();
        assert_eq!(e.expand(&env).unwrap(), PathBuf::from("/tmp/a.sock"));
        let unset: SocketEntry = "$UNSET_HERE".parse().unwrap();
        assert!(
            unset
                .expand(&env)
                .unwrap_err()
                .to_string()
                .contains("not set")
        );
        let rel: SocketEntry = "$REL".parse().unwrap();
        assert!(
            rel.expand(&env)
                .unwrap_err()
                .to_string()
                .contains("not an absolute path")
        );
    }

    #[test]
    fn lists_are_bounded_and_unique() {
        let many: Vec<String> = (0..=MAX_UNIX_SOCKETS).map(|i| format!("/s{i}")).collect();
        assert!(check_entries(&many).is_err());
        assert!(check_entries(&many[..MAX_UNIX_SOCKETS]).is_ok());
        let twice = vec!["/a".to_owned(), "/a".to_owned()];
        assert_eq!(check_entries(&twice).unwrap_err().1, "listed twice");
    }

    #[test]
    fn privileged_sockets_by_path_and_by_name() {
        for p in [
            "/run/docker.sock",
            "/run/user/1000/docker.sock",
            "/run/systemd/private",
            "/srv/any/podman.sock",
            "/run/dbus/system_bus_socket",
        ] {
            assert!(is_privileged_socket(Path::new(p)), "{p}");
        }
        for p in [
            "/run/user/1000/bus",
            "/tmp/ssh-x/agent.1",
            "/run/user/docker.sock/x",
        ] {
            assert!(!is_privileged_socket(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn resolution_needs_an_existing_socket_and_the_danger_key_for_engines() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let docker = dir.path().join("docker.sock");
        let _d = std::os::unix::net::UnixListener::bind(&docker).unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let env: BTreeMap<String, String> = [("S".to_owned(), sock.display().to_string())].into();
        let grants = resolve(&["$S".to_owned()], false, &env, &[]).unwrap();
        assert_eq!(grants[0].variable.as_deref(), Some("S"));
        assert_eq!(grants[0].path, std::fs::canonicalize(&sock).unwrap());
        let one = |e: &Path| vec![e.display().to_string()];
        assert!(matches!(
            resolve(&one(&file), false, &env, &[]),
            Err(SocketRefusal::Unusable { reason, .. }) if reason.contains("not a socket")
        ));
        assert!(matches!(
            resolve(&one(&dir.path().join("missing")), false, &env, &[]),
            Err(SocketRefusal::Unusable { .. })
        ));
        assert!(matches!(
            resolve(&one(&docker), false, &env, &[]),
            Err(SocketRefusal::Privileged { .. })
        ));
        assert!(resolve(&one(&docker), true, &env, &[]).unwrap()[0].privileged);
        let denied = [std::fs::canonicalize(dir.path()).unwrap()];
        assert!(matches!(
            resolve(&one(&sock), false, &env, &denied),
            Err(SocketRefusal::Unusable { reason, .. }) if reason.contains("deny_read")
        ));
    }

    #[test]
    fn connecting_needs_write_permission_for_the_host_uid() {
        let g = UnixSocketGrant {
            entry: "/s".into(),
            path: "/s".into(),
            variable: None,
            uid: 1000,
            gid: 1000,
            mode: 0o600,
            dev: 0,
            ino: 0,
            privileged: false,
        };
        assert!(g.connectable_by(1000, &[]));
        assert!(g.connectable_by(0, &[]));
        assert!(!g.connectable_by(1001, &[1000]));
        let group = UnixSocketGrant {
            mode: 0o660,
            ..g.clone()
        };
        assert!(group.connectable_by(1001, &[1000]));
        let world = UnixSocketGrant { mode: 0o777, ..g };
        assert!(world.connectable_by(4242, &[]));
    }
}
