//! What a run whose egress proxy terminates TLS (`egress.hosts`, `egress.credentials`)
//! needs before it starts: the secrets, read by the supervisor; a random placeholder per
//! credential; the run's CA, made for the run's wall timeout; and the trust bundle the
//! sandbox gets (the host's roots plus that CA).
//!
//! The secrets stay in the supervisor. The sandbox gets the placeholders (in the
//! variables the credentials name) and the bundle, never a key or a secret; the proxy
//! swaps a placeholder for its secret only where the host's rule says ([`relay`]).
//!
//! A secret file is read as the supervisor, which may be root, from a path the policy
//! names: so it is opened without following any symlink (`openat2` with
//! `RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW`), and refused unless it is a regular file with one
//! link, owned by the supervisor's user or root, writable by no one else, and outside
//! every path the run can write. Otherwise a run could swap the file for a link to
//! another file of root's and have the proxy send that file's bytes to the host.
//!
//! [`relay`]: tierbox_egress::tls::relay

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tierbox_egress::tls::relay::{Credential, HostRules, Place, RequestRule, Secret};
use tierbox_egress::tls::{Termination, Upstream};
use tierbox_policy::Rejection;
use tierbox_policy::hosts::CanonicalHost;
use tierbox_policy::plan::{Plan, TerminatedHost};
use tierbox_policy::policy::{CredentialPolicy, SecretSource};
use tierbox_sandbox::contract::SandboxTrust;

use crate::RunError;

/// Most bytes a secret may have (16 KiB): a token or a key fits many times; more is a
/// misnamed file, and the secret goes into a header line.
pub const MAX_SECRET_BYTES: u64 = 16 * 1024;

/// How placeholders begin: `tbx_ph_` and 32 hex digits of a fresh 128-bit random value.
pub const PLACEHOLDER_PREFIX: &str = "tbx_ph_";

/// A run's termination: the proxy's side (rules, secrets, CA) and the sandbox's (bundle,
/// placeholders).
#[derive(Debug)]
pub(crate) struct RunTermination {
    /// For the proxy.
    pub(crate) termination: Arc<Termination>,
    /// For the sandbox.
    pub(crate) trust: Arc<SandboxTrust>,
}

/// The termination `plan` needs, made at `now` for its wall timeout, or `None` when its
/// proxy terminates no host. Refused (`egress.termination_unavailable`, naming the policy
/// entry) when a secret, an upstream anchor or the host's trust store cannot be had.
pub(crate) fn prepare(plan: &Plan, now: SystemTime) -> Result<Option<RunTermination>, RunError> {
    if plan.network.terminated.is_empty() {
        return Ok(None);
    }
    let writable = writable_of(plan);
    let lifetime = Duration::from_millis(plan.limits.wall_timeout_ms);
    let (termination, trust) = terminate_hosts(
        &plan.network.terminated,
        &plan.network.upstream_roots,
        &writable,
        (now, lifetime),
    )?;
    Ok(Some(RunTermination {
        termination: Arc::new(termination),
        trust: Arc::new(trust),
    }))
}

/// The paths a run of `plan` can write: where no secret file may be.
fn writable_of(plan: &Plan) -> Vec<&Path> {
    let fs = &plan.filesystem;
    std::iter::once(plan.workspace.as_path())
        .chain(fs.writable.iter().map(PathBuf::as_path))
        .chain(fs.writable_binds().iter().map(PathBuf::as_path))
        .collect()
}

/// Whether a run of `plan` could read `c`'s secret, here and now, as it would read it
/// (`tierbox check`): `Err` is the run's refusal (`egress.termination_unavailable`). The
/// value is read and dropped, never returned.
pub fn secret_status(plan: &Plan, c: &CredentialPolicy) -> Result<(), RunError> {
    read_secret(&writable_of(plan), c).map(drop)
}

/// The proxy's termination of `terminated` and what a client of it must hold (the trust
/// bundle, the placeholders): the secrets read as the [module docs](self) say (never
/// from under `writable`), `upstream_roots` added to the host's trust store, the CA made
/// at `now` for `lifetime`. For `tierbox proxy` as for a run.
///
/// ```no_run
/// use std::time::{Duration, SystemTime};
///
/// let policy = tierbox_policy::Policy::from_toml(
///     "version = 1\n[egress]\nmode = \"strict\"\nallow = [\"api.test:443\"]\n\
///      [egress.hosts.\"api.test\"]\nallow = [\"GET /*\"]\n",
/// )
/// .unwrap();
/// let hosts = tierbox_policy::plan::NetworkPlan::terminated_from(&policy.egress);
/// let (termination, trust) = tierbox_runner::terminate::terminate_hosts(
///     &hosts,
///     &[],
///     &[],
///     (SystemTime::now(), Duration::from_secs(3600)),
/// )
/// .unwrap();
/// assert!(trust.bundle.ends_with(&termination.ca().cert_pem()));
/// ```
pub fn terminate_hosts(
    terminated: &BTreeMap<String, TerminatedHost>,
    upstream_roots: &[PathBuf],
    writable: &[&Path],
    (now, lifetime): (SystemTime, Duration),
) -> Result<(Termination, SandboxTrust), RunError> {
    let mut anchors = Vec::new();
    for path in upstream_roots {
        let pem = tierbox_egress::tls::read_anchor(path).map_err(|e| {
            refused(
                format!("egress.upstream_roots {:?}", path.display().to_string()),
                e.to_string(),
            )
        })?;
        anchors.push(pem);
    }
    let upstream = Upstream::from_system(&anchors)
        .map_err(|e| refused("egress.upstream_roots".to_owned(), e.to_string()))?;
    let mut hosts = BTreeMap::new();
    let mut placeholders = Vec::new();
    for (name, host) in terminated {
        let canonical = CanonicalHost::parse(name)
            .map_err(|e| refused(format!("egress.hosts {name:?}"), e.to_string()))?;
        let mut allow = Vec::new();
        for rule in &host.allow {
            allow.push(
                RequestRule::parse(rule)
                    .map_err(|e| refused(format!("egress.hosts {name:?}"), e.to_string()))?,
            );
        }
        let mut credentials = Vec::new();
        for c in &host.credentials {
            let placeholder = new_placeholder()?;
            placeholders.push((c.env.clone(), placeholder.clone()));
            credentials.push(Credential {
                name: c.name.clone(),
                place: place_of(c)?,
                placeholder,
                secret: read_secret(writable, c)?,
            });
        }
        hosts.insert(canonical, HostRules { allow, credentials });
    }
    let termination = Termination::new(hosts, now, lifetime, upstream)
        .map_err(|e| refused("egress.hosts".to_owned(), e.to_string()))?;
    let bundle = tierbox_egress::tls::sandbox_bundle(termination.ca())
        .map_err(|e| refused("the host's trust store".to_owned(), e.to_string()))?;
    let trust = SandboxTrust {
        bundle: bundle.into(),
        placeholders,
    };
    Ok((termination, trust))
}

fn refused(key: String, reason: String) -> RunError {
    RunError::Rejected(Rejection::TerminationUnavailable { key, reason })
}

fn credential_key(c: &CredentialPolicy) -> String {
    format!("egress.credentials {:?}", c.name)
}

fn new_placeholder() -> Result<String, RunError> {
    let id = tierbox_attest::new_id().map_err(|e| RunError::Io {
        what: "make a credential placeholder (the system's random source)",
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(format!("{PLACEHOLDER_PREFIX}{id}"))
}

fn place_of(c: &CredentialPolicy) -> Result<Place, RunError> {
    match (&c.header, &c.query) {
        (Some(h), _) => Place::header(h)
            .ok_or_else(|| refused(credential_key(c), format!("{h:?} is not a header name"))),
        (None, Some(q)) => Ok(Place::Query(q.clone())),
        (None, None) => Err(refused(
            credential_key(c),
            "names neither a header nor a query parameter".to_owned(),
        )),
    }
}

/// The secret of `c`, from the supervisor's environment or a file ([module docs](self)).
fn read_secret(writable: &[&Path], c: &CredentialPolicy) -> Result<Secret, RunError> {
    let fail = |reason: String| refused(credential_key(c), reason);
    let raw = match &c.secret {
        SecretSource {
            env: Some(var),
            file: None,
        } => std::env::var(var).map_err(|e| {
            fail(match e {
                std::env::VarError::NotPresent => {
                    format!("the supervisor's environment has no {var}")
                }
                std::env::VarError::NotUnicode(_) => format!("{var} is not UTF-8"),
            })
        })?,
        SecretSource {
            env: None,
            file: Some(path),
        } => read_secret_file(writable, path).map_err(|reason| {
            fail(format!(
                "secret.file {:?}: {reason}",
                path.display().to_string()
            ))
        })?,
        _ => {
            return Err(fail(
                "give exactly one of secret.env and secret.file".to_owned(),
            ));
        }
    };
    let value = raw
        .strip_suffix("\r\n")
        .or_else(|| raw.strip_suffix('\n'))
        .unwrap_or(&raw);
    if value.is_empty() {
        return Err(fail("the secret is empty".to_owned()));
    }
    // It goes into a header line or a query: visible ASCII and spaces only (a CR or LF
    // would split the request).
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(fail(
            "the secret holds a byte a header value cannot (a control character or non-ASCII)"
                .to_owned(),
        ));
    }
    Ok(Secret::new(value.to_owned()))
}

/// Why a secret file was not read ([module docs](self)).
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// A relative path.
    #[error("not an absolute path")]
    Relative,
    /// Inside a path the run can write.
    #[error("inside {0:?}, which the run can write (it could replace the file)")]
    Writable(String),
    /// A symlink on the way.
    #[error("reached through a symlink: name the file by its real path")]
    Symlink,
    /// Not a regular file.
    #[error("not a regular file")]
    NotRegular,
    /// More than one hard link.
    #[error("has {0} hard links (a link elsewhere could be changed to another file)")]
    Links(u64),
    /// Owned by another user.
    #[error("owned by uid {owner}, neither the supervisor's ({me}) nor root's")]
    Owner {
        /// Its owner.
        owner: u32,
        /// The supervisor's uid.
        me: u32,
    },
    /// Writable by group or others.
    #[error("mode {0:o} lets others write it (chmod go-w)")]
    OthersWrite(u32),
    /// Over [`MAX_SECRET_BYTES`].
    #[error("{0} bytes, the most read is {MAX_SECRET_BYTES}")]
    TooLarge(u64),
    /// Not UTF-8, or an I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads a secret file as the [module docs](self) say, or says why not.
fn read_secret_file(writable: &[&Path], path: &Path) -> Result<String, SecretFileError> {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
    if !path.is_absolute() {
        return Err(SecretFileError::Relative);
    }
    if let Some(w) = writable.iter().find(|w| path.starts_with(w)) {
        return Err(SecretFileError::Writable(w.display().to_string()));
    }
    let fd = rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => SecretFileError::Symlink,
        e => SecretFileError::Io(e.into()),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(SecretFileError::NotRegular);
    }
    if st.st_nlink != 1 {
        return Err(SecretFileError::Links(st.st_nlink));
    }
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Err(SecretFileError::Owner {
            owner: st.st_uid,
            me,
        });
    }
    if st.st_mode & 0o022 != 0 {
        return Err(SecretFileError::OthersWrite(st.st_mode & 0o7777));
    }
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if size > MAX_SECRET_BYTES {
        return Err(SecretFileError::TooLarge(size));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_SECRET_BYTES + 1)
        .read_to_string(&mut text)?;
    let read = text.len() as u64;
    if read > MAX_SECRET_BYTES {
        return Err(SecretFileError::TooLarge(read));
    }
    Ok(text)
}

#[cfg(test)]
#[path = "terminate_tests.rs"]
mod tests;
