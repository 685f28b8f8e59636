//! Finding a usable bubblewrap on this host and diagnosing why one is not.

use super::*;

/// A usable bubblewrap on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapInfo {
    /// The binary.
    pub path: PathBuf,
    /// Its version.
    pub version: BwrapVersion,
    /// Whether it is installed setuid root (older distributions).
    pub setuid: bool,
    /// The optional flags it supports.
    pub features: BwrapFeatures,
}

/// Finds bwrap (`path` if given, else `/usr/bin/bwrap`, else the first `bwrap` in
/// `PATH`), runs `bwrap --version`, requires [`MIN_BWRAP_VERSION`], then checks that it
/// can build a sandbox here: user namespace, `/proc` and `/dev`, running `true`. Each
/// spawn has a null stdin, an empty environment and a [`PROBE_TIMEOUT`] bound.
///
/// A failed sandbox check is [`BwrapError::Unusable`] with bwrap's stderr and the likely
/// cause read from the user-namespace sysctls.
pub fn probe_bwrap(path: Option<&Path>) -> Result<BwrapInfo, BwrapError> {
    let bwrap = locate(path)?;
    let (status, stdout, stderr) = run_bounded(&bwrap, &[OsString::from("--version")])?;
    let text = String::from_utf8_lossy(&stdout);
    let version = match BwrapVersion::parse_version_output(&text) {
        Some(v) if status.success() => v,
        _ => {
            return Err(BwrapError::Unusable {
                reason: format!(
                    "`{} --version` gave {status} and unrecognised output {:?}",
                    bwrap.display(),
                    text.trim()
                ),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            });
        }
    };
    if version < MIN_BWRAP_VERSION {
        return Err(BwrapError::TooOld {
            version,
            minimum: MIN_BWRAP_VERSION,
        });
    }
    let setuid = std::fs::metadata(&bwrap).is_ok_and(|m| m.permissions().mode() & 0o4000 != 0);
    let features = BwrapFeatures::for_version(version, setuid);

    let Some(true_path) = TRUE_CANDIDATES.iter().map(Path::new).find(|p| p.exists()) else {
        return Err(BwrapError::Unusable {
            reason: format!(
                "no `true` program ({}) to run the sandbox check with",
                TRUE_CANDIDATES.join(", ")
            ),
            stderr: String::new(),
        });
    };
    let check = sandbox_check_argv(&HostLayout::probe_top_level(), features, true_path);
    let (status, _, stderr) = run_bounded(&bwrap, &check)?;
    if !status.success() {
        let sysctls: Vec<(String, Option<String>)> = USERNS_SYSCTLS
            .iter()
            .map(|p| {
                let value = std::fs::read_to_string(p).ok().map(|v| v.trim().to_owned());
                ((*p).to_owned(), value)
            })
            .collect();
        return Err(BwrapError::Unusable {
            reason: format!(
                "`bwrap` could not create a sandbox ({status}): {}",
                userns_diagnosis(&sysctls)
            ),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        });
    }
    Ok(BwrapInfo {
        path: bwrap,
        version,
        setuid,
        features,
    })
}

/// `probe_bwrap` with the default search, run once per process; later calls return the
/// first result (bwrap is not installed or removed while a supervisor runs, and the
/// probe costs two spawns).
pub fn probe_bwrap_cached() -> Result<BwrapInfo, BwrapError> {
    static CACHE: OnceLock<Result<BwrapInfo, BwrapError>> = OnceLock::new();
    CACHE.get_or_init(|| probe_bwrap(None)).clone()
}

/// The argv of the sandbox check: the fixed namespace and privilege flags of every run,
/// `/usr` and the merged-/usr links as found on the host, a fresh `/proc` and `/dev`, and
/// `true_path`. Pure.
pub fn sandbox_check_argv(
    host: &HostLayout,
    features: BwrapFeatures,
    true_path: &Path,
) -> Vec<OsString> {
    let mut argv = Argv::default();
    argv.flags(&["--unshare-all", "--unshare-user"]);
    if features.disable_userns {
        argv.flags(&["--disable-userns"]);
    }
    argv.flags(&[
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]);
    for path in std::iter::once("/usr").chain(MERGED_USR_LINKS.iter().copied()) {
        match host.kind(Path::new(path)) {
            PathKind::Dir => argv.flag_pair("--ro-bind", path, path),
            PathKind::Symlink { target, .. } => argv.flag_pair("--symlink", target, path),
            PathKind::File | PathKind::Missing => {}
        }
    }
    argv.flag_value("--proc", "/proc");
    argv.flag_value("--dev", "/dev");
    argv.flags(&["--"]);
    argv.push(true_path);
    argv.0
}

/// The likely reason a user namespace could not be created, from the sysctls that
/// control it (`(path, value)`; `None` when the file does not exist). Pure.
pub fn userns_diagnosis(sysctls: &[(String, Option<String>)]) -> String {
    let mut causes = Vec::new();
    for (path, value) in sysctls {
        let Some(value) = value else { continue };
        let name = path.trim_start_matches("/proc/sys/").replace('/', ".");
        let cause = match (name.as_str(), value.as_str()) {
            ("kernel.unprivileged_userns_clone", "0") => Some(
                "unprivileged user namespaces are disabled; enable with `sysctl -w kernel.unprivileged_userns_clone=1`",
            ),
            ("user.max_user_namespaces", "0") => Some(
                "user namespaces are disabled; enable with `sysctl -w user.max_user_namespaces=15000`",
            ),
            ("kernel.apparmor_restrict_unprivileged_userns", "1") => Some(
                "AppArmor restricts unprivileged user namespaces; install an AppArmor profile for bwrap (Ubuntu: the bwrap-userns-restrict profile) or set it to 0",
            ),
            _ => None,
        };
        if let Some(cause) = cause {
            causes.push(format!("{name} = {value}: {cause}"));
        }
    }
    if causes.is_empty() {
        let seen: Vec<String> = sysctls
            .iter()
            .filter_map(|(p, v)| {
                v.as_ref().map(|v| {
                    format!(
                        "{} = {v}",
                        p.trim_start_matches("/proc/sys/").replace('/', ".")
                    )
                })
            })
            .collect();
        format!(
            "no user-namespace sysctl forbids it ({}); likely a container or seccomp policy that blocks unshare(CLONE_NEWUSER) or mounting /proc",
            if seen.is_empty() {
                "none present".to_owned()
            } else {
                seen.join(", ")
            }
        )
    } else {
        causes.join("; ")
    }
}

pub(super) fn locate(explicit: Option<&Path>) -> Result<PathBuf, BwrapError> {
    let mut searched = Vec::new();
    let candidates: Vec<PathBuf> = match explicit {
        Some(path) => vec![path.to_path_buf()],
        None => std::iter::once(PathBuf::from(DEFAULT_BWRAP_PATH))
            .chain(
                std::env::var_os("PATH")
                    .map(|p| {
                        std::env::split_paths(&p)
                            .filter(|d| d.is_absolute())
                            .map(|d| d.join("bwrap"))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default(),
            )
            .collect(),
    };
    for candidate in candidates {
        let executable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(candidate);
        }
        if !searched.contains(&candidate) {
            searched.push(candidate);
        }
    }
    Err(BwrapError::NotFound { searched })
}

/// Runs `program args` with a null stdin, an empty environment and [`PROBE_TIMEOUT`];
/// returns its status and bounded stdout and stderr.
pub(super) fn run_bounded(
    program: &Path,
    args: &[OsString],
) -> Result<(ExitStatus, Vec<u8>, Vec<u8>), BwrapError> {
    let unusable = |reason: String| BwrapError::Unusable {
        reason,
        stderr: String::new(),
    };
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| unusable(format!("cannot run {}: {e}", program.display())))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(PROBE_POLL_INTERVAL),
            Ok(None) => {
                // Our own child, by its handle: kill and reap it.
                let _ = child.kill();
                let _ = child.wait();
                return Err(unusable(format!(
                    "{} did not finish within {} ms",
                    program.display(),
                    PROBE_TIMEOUT.as_millis()
                )));
            }
            Err(e) => {
                return Err(unusable(format!(
                    "waiting for {} failed: {e}",
                    program.display()
                )));
            }
        }
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(out) = child.stdout.take() {
        let _ = out.take(PROBE_OUTPUT_MAX_BYTES).read_to_end(&mut stdout);
    }
    if let Some(err) = child.stderr.take() {
        let _ = err.take(PROBE_OUTPUT_MAX_BYTES).read_to_end(&mut stderr);
    }
    Ok((status, stdout, stderr))
}
