//! Tier C on macOS: a Seatbelt (SBPL) profile generated from the [`Plan`], run through
//! `/usr/bin/sandbox-exec` only.
//!
//! The profile ([`sbpl_profile`], pure, tested on every host) keeps these invariants:
//! - `(deny default)`: everything not allowed below is denied;
//! - processes: fork and exec allowed (children inherit the sandbox), signals and
//!   process information only for processes of the same sandbox;
//! - reads: the macOS system paths ([`MACOS_SYSTEM_READ_PATHS`]), the workspace, the
//!   Plan's read-only and writable paths, a few device nodes; the host's secrets
//!   ([`MACOS_SECRET_PATHS`]) and the Plan's `deny_read` paths denied after that;
//! - writes: the workspace, the Plan's writable paths and the run's private temporary
//!   directory only; protected paths denied (`file-write*` on the path and beneath it),
//!   and every directory from the workspace down to a protected path denied unlink and
//!   write, so the path cannot be moved or deleted away and recreated;
//! - nothing left behind is a privilege: `file-write-setugid` (setting setuid or setgid
//!   on any file, by `chmod` or at creation) is denied wherever writes are allowed;
//!   device nodes need root on macOS, which the run never has;
//! - network: denied, or — when the Plan needs the egress proxy — only TCP to
//!   `localhost:<proxy port>`;
//! - no engine sockets: Docker's and Podman's sockets ([`MACOS_ENGINE_SOCKETS`]) and
//!   Docker's Mach services are denied explicitly, whatever else allows;
//! - sysctl reads only; Mach lookups only of [`MACH_SERVICES`];
//! - every path is written as an SBPL string literal with `\` and `"` escaped; a path
//!   with a control character or that is not UTF-8 is a typed error
//!   ([`SbplError::UnsupportedPath`]).
//!
//! `sandbox-exec` is deprecated by Apple but still shipped and used by peers for the same
//! purpose; its profile language is not a stable interface (see SECURITY.md). The launch
//! code (`launch`, macOS only) starts `/usr/bin/sandbox-exec -p PROFILE -- PROGRAM
//! ARGS…` with the Plan's environment, a new process group and rlimits.
//!
//! Limits on macOS ([`rlimits`]): `RLIMIT_CPU`, `RLIMIT_NOFILE`, `RLIMIT_FSIZE` and
//! `RLIMIT_CORE = 0` are enforced. `RLIMIT_AS` and `RLIMIT_RSS` are not enforced by the
//! macOS kernel, so memory is not limited; `RLIMIT_NPROC` counts every process of the
//! user, not of the run, so it is not set (a low value would fail the run at once on a
//! busy desktop). There are no cgroups: the `cgroup` layer is missing on every macOS run
//! and must be in `tier.optional_layers`.

#[cfg(target_os = "macos")]
mod launch;
#[cfg(target_os = "macos")]
#[allow(unsafe_code)]
mod sys;
#[cfg(target_os = "macos")]
pub use launch::{MacLaunchError, MacLaunched, launch};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, Layer, Rejection, Tier, TierCBackend};

/// Name of this backend in outcomes and attestations.
pub const BACKEND_NAME: &str = "tier_c_macos_sandbox_exec";

/// The only `sandbox-exec` ever run: Apple's, by absolute path (never a PATH lookup).
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// System paths every run may read: programs, libraries, frameworks, the dyld cache,
/// `/private/etc` (the target of `/etc`) and the time zone database. Symlinks such as
/// `/etc`, `/tmp` and `/var` resolve to `/private/…` before the sandbox checks them.
pub const MACOS_SYSTEM_READ_PATHS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr",
    "/System",
    "/Library/Apple",
    "/Library/Developer/CommandLineTools",
    "/private/etc",
    "/private/var/db/dyld",
    "/private/var/db/timezone",
    "/Applications/Xcode.app/Contents/Developer",
];

/// Host secrets under the readable system paths, denied after the allows.
pub const MACOS_SECRET_PATHS: &[&str] = &[
    "/private/etc/master.passwd",
    "/private/etc/sudoers",
    "/private/etc/sudoers.d",
    "/private/etc/ssh",
    "/private/etc/kcpassword",
];

/// Device nodes every run may read and write.
pub const MACOS_DEVICES_RW: &[&str] = &["/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"];

/// Device nodes every run may read.
pub const MACOS_DEVICES_RO: &[&str] = &["/dev/random", "/dev/urandom"];

/// Container engine sockets denied explicitly (read, write and connect), as SBPL
/// regular expressions: the system ones and the per-user ones of Docker Desktop, Colima,
/// Rancher Desktop, OrbStack and Podman machine.
pub const MACOS_ENGINE_SOCKETS: &[&str] = &[
    r"^/private/var/run/docker\.sock$",
    r"^/var/run/docker\.sock$",
    r"^/Users/[^/]+/\.docker/run/docker\.sock$",
    r"^/Users/[^/]+/\.colima/[^/]+/docker\.sock$",
    r"^/Users/[^/]+/\.rd/docker\.sock$",
    r"^/Users/[^/]+/\.orbstack/run/docker\.sock$",
    r"^/Users/[^/]+/\.local/share/containers/podman/machine/.*\.sock$",
    r"^/private/var/folders/.*/podman/.*\.sock$",
];

/// The Mach services a run may look up, each with its reason. Everything else (the
/// window server, pasteboard, keychain agents, launchd job control, Docker's services)
/// stays denied.
pub const MACH_SERVICES: &[(&str, &str)] = &[
    (
        "com.apple.system.opendirectoryd.libinfo",
        "user and group lookups (getpwuid, getgrgid)",
    ),
    (
        "com.apple.system.notification_center",
        "notify(3), used by libc for time zone and locale changes",
    ),
    ("com.apple.system.logger", "syslog(3)"),
    ("com.apple.logd", "os_log, written by system libraries"),
    (
        "com.apple.cfprefsd.daemon",
        "reading preferences (CoreFoundation-based tools)",
    ),
    (
        "com.apple.cfprefsd.agent",
        "reading per-user preferences (CoreFoundation-based tools)",
    ),
    (
        "com.apple.trustd.agent",
        "certificate trust evaluation for TLS through the egress proxy",
    ),
];

/// Inputs of [`sbpl_profile`] that are not in the Plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SbplOptions {
    /// The egress proxy's port on `localhost`, when the Plan needs the proxy.
    pub proxy_port: Option<u16>,
    /// The run's private temporary directory (`TMPDIR`, and `HOME` when private),
    /// writable; already canonical (`/private/var/folders/…`).
    pub tmp_dir: Option<PathBuf>,
}

/// Why a Plan cannot be written as an SBPL profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SbplError {
    /// A path the profile must name cannot be an SBPL string literal.
    #[error("path {path:?} cannot be written in a sandbox profile: {reason}")]
    UnsupportedPath {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// The Plan needs the egress proxy but no port was given.
    #[error("the plan needs the egress proxy, and no proxy port was given")]
    NoProxyPort,
    /// The Plan needs the host network, which this backend never grants.
    #[error("egress.mode = \"{mode}\" needs the host network; tier c on macOS denies it")]
    HostNetwork {
        /// The mode.
        mode: String,
    },
}

/// `path` as an SBPL string literal: `"…"` with `\` and `"` escaped.
///
/// ```
/// use std::path::Path;
/// use tierbox_sandbox::macos::sbpl_string;
/// assert_eq!(sbpl_string(Path::new("/a \"b\"\\c")).unwrap(), r#""/a \"b\"\\c""#);
/// assert!(sbpl_string(Path::new("/a\nb")).is_err());
/// ```
pub fn sbpl_string(path: &Path) -> Result<String, SbplError> {
    let unsupported = |reason| SbplError::UnsupportedPath {
        path: path.to_path_buf(),
        reason,
    };
    let s = path.to_str().ok_or_else(|| unsupported("not UTF-8"))?;
    if !s.starts_with('/') {
        return Err(unsupported("not absolute"));
    }
    if s.chars().any(char::is_control) {
        return Err(unsupported(
            "holds a control character (newline, tab, NUL, …)",
        ));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        if matches!(ch, '\\' | '"') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('"');
    Ok(out)
}

fn filters(kind: &str, paths: &[PathBuf]) -> Result<String, SbplError> {
    let mut out = String::new();
    for p in paths {
        let _ = write!(out, "\n    ({kind} {})", sbpl_string(p)?);
    }
    Ok(out)
}

fn paths(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(PathBuf::from).collect()
}

/// Every directory strictly between `workspace` and `protected`, then `protected`.
fn chain_below(workspace: &Path, protected: &Path) -> Vec<PathBuf> {
    let Ok(rel) = protected.strip_prefix(workspace) else {
        return vec![protected.to_path_buf()];
    };
    let mut cur = workspace.to_path_buf();
    rel.components()
        .map(|c| {
            cur.push(c);
            cur.clone()
        })
        .collect()
}

/// The SBPL profile that runs `plan` (see the module documentation for what it allows).
///
/// ```
/// # fn demo(plan: &tierbox_policy::Plan) -> Result<(), tierbox_sandbox::macos::SbplError> {
/// use tierbox_sandbox::macos::{SbplOptions, sbpl_profile};
/// let profile = sbpl_profile(plan, &SbplOptions::default())?;
/// assert!(profile.starts_with("(version 1)\n(deny default)"));
/// # Ok(()) }
/// ```
pub fn sbpl_profile(plan: &Plan, opts: &SbplOptions) -> Result<String, SbplError> {
    let fs = &plan.filesystem;
    let ws = std::slice::from_ref(&plan.workspace);
    let mut p = String::new();
    p.push_str("(version 1)\n(deny default)\n");
    p.push_str("\n; Processes: fork and exec (children inherit this sandbox); signals and process\n; information only within it.\n");
    p.push_str("(allow process-fork)\n(allow process-exec)\n");
    p.push_str("(allow signal (target same-sandbox))\n");
    p.push_str("(allow process-info* (target same-sandbox))\n");
    p.push_str("\n; Kernel state: read-only.\n(allow sysctl-read)\n(deny sysctl-write)\n");
    p.push_str("\n; POSIX semaphores and shared memory (multiprocessing, build tools).\n(allow ipc-posix-sem)\n(allow ipc-posix-shm)\n");
    p.push_str("\n; Mach services: only these.\n(allow mach-lookup");
    for (name, _) in MACH_SERVICES {
        let _ = write!(p, "\n    (global-name \"{name}\")");
    }
    p.push_str(")\n");

    // Reads.
    let mut readable = paths(MACOS_SYSTEM_READ_PATHS);
    readable.extend(fs.read_only_binds().iter().cloned());
    readable.extend(fs.writable_binds().iter().cloned());
    readable.push(plan.workspace.clone());
    readable.extend(opts.tmp_dir.iter().cloned());
    p.push_str("\n; Reads: system paths, the workspace, declared paths, the private tmp.\n");
    let _ = writeln!(p, "(allow file-read*{})", filters("subpath", &readable)?);
    // Path lookups walk every ancestor of a granted path: their metadata (not their
    // contents) is readable.
    let mut ancestors: Vec<PathBuf> = readable
        .iter()
        .flat_map(|r| r.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    ancestors.sort();
    ancestors.dedup();
    let _ = writeln!(
        p,
        "(allow file-read-metadata{})",
        filters("literal", &ancestors)?
    );
    let _ = writeln!(
        p,
        "(allow file-read* file-write-data file-ioctl{})",
        filters("literal", &paths(MACOS_DEVICES_RW))?
    );
    let _ = writeln!(
        p,
        "(allow file-read*{})",
        filters("literal", &paths(MACOS_DEVICES_RO))?
    );

    // Writes.
    let mut writable = vec![plan.workspace.clone()];
    writable.extend(fs.writable_binds().iter().cloned());
    writable.extend(opts.tmp_dir.iter().cloned());
    p.push_str("\n; Writes: the workspace, declared writable paths, the private tmp.\n");
    let _ = writeln!(p, "(allow file-write*{})", filters("subpath", &writable)?);

    // Network.
    p.push_str("\n; Network.\n");
    match plan.network.mode {
        EgressMode::BlockAll => p.push_str("(deny network*)\n"),
        EgressMode::Strict if plan.network.allow.is_empty() => p.push_str("(deny network*)\n"),
        EgressMode::Strict => {
            let port = opts.proxy_port.ok_or(SbplError::NoProxyPort)?;
            p.push_str("(deny network*)\n");
            let _ = writeln!(
                p,
                "; Only the egress proxy on loopback.\n(allow network-outbound (remote tcp \"localhost:{port}\"))"
            );
        }
        EgressMode::AllowAll => {
            return Err(SbplError::HostNetwork {
                mode: "allow_all".to_owned(),
            });
        }
        EgressMode::Preflight => {
            return Err(SbplError::HostNetwork {
                mode: "preflight".to_owned(),
            });
        }
    }

    // Denials last: in SBPL a later matching rule wins over an earlier one.
    p.push_str("\n; Host secrets and denied paths: never readable.\n");
    let mut denied = paths(MACOS_SECRET_PATHS);
    denied.extend(fs.deny_read.iter().cloned());
    let _ = writeln!(
        p,
        "(deny file-read* file-write*{})",
        filters("subpath", &denied)?
    );
    if !fs.protected.is_empty() {
        p.push_str("\n; Protected paths: read-only, including beneath them.\n");
        let _ = writeln!(
            p,
            "(deny file-write*{})",
            filters("subpath", &fs.protected)?
        );
        // Every directory from the workspace down to a protected path: no unlink or
        // rename (file-write-unlink) and no other write of the entry itself, so `mv` or
        // `rm -r` cannot take the protected path away and put another in its place.
        let mut chain: Vec<PathBuf> = ws.to_vec();
        for pr in &fs.protected {
            chain.extend(chain_below(&plan.workspace, pr));
        }
        chain.sort();
        chain.dedup();
        p.push_str("; Their ancestors up to the workspace: no unlink or rename.\n");
        let _ = writeln!(p, "(deny file-write-unlink{})", filters("literal", &chain)?);
        let ancestors: Vec<PathBuf> = chain
            .into_iter()
            .filter(|c| c != &plan.workspace && !fs.protected.contains(c))
            .collect();
        if !ancestors.is_empty() {
            let _ = writeln!(p, "(deny file-write*{})", filters("literal", &ancestors)?);
        }
    }
    p.push_str(
        "\n; Nothing a run leaves behind is setuid or setgid, wherever it may write.\n(deny file-write-setugid)\n",
    );
    p.push_str("\n; Container engines: never reachable, whatever is granted above.\n(deny file-read* file-write*");
    for re in MACOS_ENGINE_SOCKETS {
        let _ = write!(p, "\n    (regex #\"{re}\")");
    }
    // Connecting to a unix socket is `network-outbound` on the socket's path.
    p.push_str(")\n(deny network-outbound");
    for re in MACOS_ENGINE_SOCKETS {
        let _ = write!(p, "\n    (regex #\"{re}\")");
    }
    p.push_str(")\n(deny mach-lookup (global-name-prefix \"com.docker.\"))\n");
    Ok(p)
}

/// The layers a macOS Tier C run cannot provide, checked against the policy: missing
/// ones are returned when the policy lists them in `tier.optional_layers`, and reject the
/// run otherwise. There are no cgroups on macOS (memory and process-count limits); the
/// profile stands where landlock and seccomp stand on Linux. A backend other than
/// `native` is rejected: `bwrap` and the container backends are not available here.
///
/// ```
/// # fn demo(plan: &tierbox_policy::Plan) {
/// match tierbox_sandbox::macos::check_layers(plan) {
///     Ok(missing) => println!("runs, recording {missing:?}"),
///     Err(rejection) => println!("{}", rejection.code()),
/// }
/// # }
/// ```
pub fn check_layers(plan: &Plan) -> Result<Vec<Layer>, Rejection> {
    if plan.tier.backend != TierCBackend::Native {
        return Err(Rejection::TierUnavailable {
            tier: Tier::C,
            reason: format!(
                "tier.backend = \"{}\" is not available on macOS; \"native\" runs sandbox-exec",
                plan.tier.backend
            ),
        });
    }
    // The profile is the filesystem and operation layer (what landlock and seccomp are
    // on Linux); the cgroup has no counterpart, nor has a bound on the run's temporary
    // files (no tmpfs of its own).
    let mut missing = Vec::new();
    for (layer, reason) in [
        (
            Layer::Cgroup,
            "macOS has no cgroups, so memory and process-count limits are not enforced",
        ),
        (
            Layer::Disk,
            "nothing bounds the run's temporary files on macOS (limits.disk_bytes)",
        ),
    ] {
        if !plan.tier.optional_layers.contains(&layer) {
            return Err(Rejection::TierUnavailable {
                tier: Tier::C,
                reason: format!(
                    "{layer} cannot be enforced: {reason} (a policy that accepts running without it lists \"{layer}\" in tier.optional_layers)"
                ),
            });
        }
        missing.push(layer);
    }
    Ok(missing)
}

/// An rlimit the macOS launch sets: `(name, resource, value)`.
pub type Rlimit = (&'static str, MacResource, u64);

/// The rlimits macOS enforces and the launch sets (see the module documentation for the
/// ones it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacResource {
    /// `RLIMIT_CPU`, seconds.
    Cpu,
    /// `RLIMIT_NOFILE`.
    NoFile,
    /// `RLIMIT_FSIZE`, bytes.
    FSize,
    /// `RLIMIT_CORE`, bytes.
    Core,
}

/// The rlimits of `plan` on macOS.
pub fn rlimits(plan: &Plan) -> Vec<Rlimit> {
    let l = &plan.limits;
    vec![
        ("RLIMIT_CPU", MacResource::Cpu, l.cpu_time_secs),
        ("RLIMIT_NOFILE", MacResource::NoFile, l.open_files),
        ("RLIMIT_FSIZE", MacResource::FSize, l.file_size_bytes),
        ("RLIMIT_CORE", MacResource::Core, 0),
    ]
}

/// The `sandbox-exec` argv (without the environment): `[SANDBOX_EXEC, "-p", profile,
/// "--", program, args…]`. `argv[0]` of the program is its absolute path: sandbox-exec
/// executes its first operand and passes it as `argv[0]`.
pub fn sandbox_exec_argv(plan: &Plan, profile: &str) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec![
        SANDBOX_EXEC.into(),
        "-p".into(),
        profile.into(),
        "--".into(),
        plan.program.clone().into_os_string(),
    ];
    argv.extend(plan.argv.iter().skip(1).map(Into::into));
    argv
}

#[cfg(test)]
mod tests;
