//! Filesystem probes: reading and writing outside the workspace, and the file-size limit.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::sys::{self, io_errno_name};
use crate::{ProbeError, ProbeResult, Report};

/// The target must exist, so that a denial cannot be mistaken for `ENOENT`. `stat` is not
/// mediated by landlock, so this works from inside the sandbox.
fn must_exist(path: &Path) -> Result<std::fs::Metadata, ProbeError> {
    std::fs::metadata(path).map_err(|e| {
        ProbeError(format!(
            "cannot stat {} ({}); the target must exist for the probe to mean anything",
            path.display(),
            io_errno_name(&e)
        ))
    })
}

/// Reads `path` (lists it, for a directory); `Ok` says what was read.
fn try_read(path: &Path, is_dir: bool) -> Result<String, String> {
    if is_dir {
        return match std::fs::read_dir(path) {
            Ok(entries) => Ok(format!("listed {} entries", entries.count())),
            Err(e) => Err(format!("list {}", io_errno_name(&e))),
        };
    }
    let mut file = File::open(path).map_err(|e| format!("open {}", io_errno_name(&e)))?;
    let mut buf = [0u8; 4096];
    // The content is never printed: it may be a real secret.
    match file.read(&mut buf) {
        Ok(n) => Ok(format!("read {n} bytes")),
        Err(e) => Err(format!("read {}", io_errno_name(&e))),
    }
}

/// `read-denied PATH`: reading PATH (listing it, for a directory) must fail, directly and
/// by the usual detours: a symlink to it and a hard link to it made in the working
/// directory (the workspace), and the `/proc/self/root` magic link.
pub fn read_denied(path: &Path) -> ProbeResult {
    let meta = must_exist(path)?;
    let is_dir = meta.is_dir();
    let tag = format!("tierbox-probe-{}", std::process::id());
    let mut routes: Vec<(String, Result<String, String>)> = Vec::new();
    routes.push((path.display().to_string(), try_read(path, is_dir)));

    let symlink = PathBuf::from(format!("{tag}.symlink"));
    let via_symlink = match std::os::unix::fs::symlink(path, &symlink) {
        Ok(()) => try_read(&symlink, is_dir),
        Err(e) => Err(format!("symlink {}", io_errno_name(&e))),
    };
    let _ = std::fs::remove_file(&symlink);
    routes.push((format!("symlink ./{}", symlink.display()), via_symlink));

    if !is_dir {
        let hardlink = PathBuf::from(format!("{tag}.hardlink"));
        let via_link = match std::fs::hard_link(path, &hardlink) {
            Ok(()) => try_read(&hardlink, false)
                .map(|r| format!("linked, {r}"))
                .map_err(|e| format!("linked, {e}")),
            Err(e) => Err(format!("link {}", io_errno_name(&e))),
        };
        let _ = std::fs::remove_file(&hardlink);
        // A link that exists is already a leak to whoever reads the workspace later.
        let via_link = match via_link {
            Err(e) if e.starts_with("linked") => Ok(e),
            other => other,
        };
        routes.push((format!("hard link ./{}", hardlink.display()), via_link));
    }

    if path.is_absolute() {
        let via_proc = Path::new("/proc/self/root").join(path.strip_prefix("/").unwrap_or(path));
        routes.push((via_proc.display().to_string(), try_read(&via_proc, is_dir)));
    }

    let text: Vec<String> = routes
        .iter()
        .map(|(route, r)| match r {
            Ok(what) => format!("{route}: SUCCEEDED ({what})"),
            Err(e) => format!("{route}: {e}"),
        })
        .collect();
    let text = text.join("; ");
    Ok(if routes.iter().any(|(_, r)| r.is_ok()) {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// One write attempt and what happened.
struct Attempt {
    what: String,
    result: std::io::Result<()>,
    /// What to remove if the attempt succeeded.
    created: Option<PathBuf>,
}

/// `truncate(path, its current length)` (a no-op when allowed).
fn truncate_to_current_length(path: &Path) -> std::io::Result<()> {
    let len = std::fs::metadata(path)?.len();
    let len = i64::try_from(len).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    sys::truncate(path, len).map_err(|e| e.source)
}

/// `write-denied PATH`: PATH is a directory, or an existing file (then its directory is
/// the target too). Every way of changing them must fail: appending to the file, moving
/// it out, truncating it, creating a file, a directory or a symlink in the directory, and renaming or
/// hard-linking a workspace file into it. Whatever succeeded is undone.
pub fn write_denied(path: &Path) -> ProbeResult {
    let meta = must_exist(path)?;
    let (dir, file) = if meta.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (dir.to_path_buf(), Some(path.to_path_buf()))
    };
    let tag = format!("tierbox-probe-{}", std::process::id());
    // The rename and link sources live in the working directory (the workspace).
    let src = PathBuf::from(format!("{tag}.src"));
    File::create(&src)
        .and_then(|mut f| f.write_all(b"tierbox-probe\n"))
        .map_err(|e| {
            ProbeError(format!(
                "cannot create {} in the working directory ({}); run the probe in the workspace",
                src.display(),
                io_errno_name(&e)
            ))
        })?;

    let mut attempts = Vec::new();
    if let Some(file) = &file {
        attempts.push(Attempt {
            what: format!("append to {}", file.display()),
            result: OpenOptions::new()
                .append(true)
                .open(file)
                .and_then(|mut f| f.write_all(b"tierbox-probe was here\n")),
            created: None,
        });
        // truncate(2) by path, to the current length: a success changes no content.
        attempts.push(Attempt {
            what: format!("truncate {}", file.display()),
            result: truncate_to_current_length(file),
            created: None,
        });
        let moved = PathBuf::from(format!("{tag}.moved-out"));
        let result = std::fs::rename(file, &moved);
        if result.is_ok() {
            // Put it back; the attempt has already proven the point.
            let _ = std::fs::rename(&moved, file);
        }
        attempts.push(Attempt {
            what: format!("rename {} into the workspace", file.display()),
            result,
            created: None,
        });
    }
    let new_file = dir.join(format!("{tag}.new"));
    attempts.push(Attempt {
        what: format!("create {}", new_file.display()),
        result: OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&new_file)
            .map(drop),
        created: Some(new_file),
    });
    let new_dir = dir.join(format!("{tag}.dir"));
    attempts.push(Attempt {
        what: format!("mkdir {}", new_dir.display()),
        result: std::fs::create_dir(&new_dir),
        created: Some(new_dir),
    });
    let link = dir.join(format!("{tag}.symlink"));
    attempts.push(Attempt {
        what: format!("symlink {}", link.display()),
        result: std::os::unix::fs::symlink("/", &link),
        created: Some(link),
    });
    let renamed = dir.join(format!("{tag}.renamed"));
    attempts.push(Attempt {
        what: format!("rename a workspace file to {}", renamed.display()),
        result: std::fs::rename(&src, &renamed),
        created: Some(renamed),
    });
    let linked = dir.join(format!("{tag}.linked"));
    attempts.push(Attempt {
        what: format!("hard-link a workspace file to {}", linked.display()),
        result: std::fs::hard_link(&src, &linked),
        created: Some(linked),
    });

    for a in &attempts {
        if let (Ok(()), Some(p)) = (&a.result, &a.created) {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
        }
    }
    let _ = std::fs::remove_file(&src);

    let summary: Vec<String> = attempts
        .iter()
        .map(|a| match &a.result {
            Ok(()) => format!("{}: SUCCEEDED", a.what),
            Err(e) => format!("{}: {}", a.what, io_errno_name(e)),
        })
        .collect();
    let summary = summary.join("; ");
    Ok(if attempts.iter().any(|a| a.result.is_ok()) {
        Report::Broken(summary)
    } else {
        Report::Holds(summary)
    })
}

/// `chmod-denied PATH`: the mode of PATH cannot be changed. The probe sets the mode PATH
/// already has, so even a success changes nothing but the inode's change time.
pub fn chmod_denied(path: &Path) -> ProbeResult {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        ProbeError(format!(
            "cannot stat {} ({}); the target must exist",
            path.display(),
            io_errno_name(&e)
        ))
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    Ok(
        match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
            Ok(()) => Report::Broken(format!(
                "chmod({}, {mode:o}) SUCCEEDED: any mode could be set",
                path.display()
            )),
            Err(e) => Report::Holds(format!(
                "chmod({}, {mode:o}): {}",
                path.display(),
                io_errno_name(&e)
            )),
        },
    )
}

/// `fchmod-denied PATH`: opens PATH read-only (landlock allows reading it) and tries to
/// change its mode through the fd; that must fail.
pub fn fchmod_denied(path: &Path) -> ProbeResult {
    use std::os::unix::fs::PermissionsExt;
    let file = std::fs::File::open(path).map_err(|e| {
        ProbeError(format!(
            "cannot open {} read-only ({}); the target must be readable",
            path.display(),
            io_errno_name(&e)
        ))
    })?;
    let mode = file
        .metadata()
        .map_err(|e| ProbeError(format!("fstat {}: {}", path.display(), io_errno_name(&e))))?
        .permissions()
        .mode()
        & 0o7777;
    Ok(
        match file.set_permissions(std::fs::Permissions::from_mode(mode)) {
            Ok(()) => Report::Broken(format!(
                "fchmod(open({}), {mode:o}) SUCCEEDED",
                path.display()
            )),
            Err(e) => Report::Holds(format!(
                "fchmod(open({}), {mode:o}): {}",
                path.display(),
                io_errno_name(&e)
            )),
        },
    )
}

/// The file `fsize` writes when none is named (in the working directory).
const FSIZE_DEFAULT_FILE: &str = "tierbox-probe-fsize.bin";

/// Size of each write of `fsize`, in bytes.
const FSIZE_CHUNK_BYTES: usize = 64 * 1024;

/// `fsize BYTES`: writes 2 × BYTES to a file; it must stop at BYTES with `EFBIG`.
///
/// `RLIMIT_FSIZE` raises `SIGXFSZ`, whose default action kills the process. Without
/// `--signal` the probe ignores it and expects `EFBIG`; with `--signal` it keeps the
/// default, is killed, and the caller checks the outcome and the file.
pub fn fsize(bytes: u64, signal: bool, file: Option<PathBuf>) -> ProbeResult {
    if !signal {
        sys::ignore_signal(libc::SIGXFSZ)?;
    }
    let path = file.unwrap_or_else(|| PathBuf::from(FSIZE_DEFAULT_FILE));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| {
            ProbeError(format!(
                "cannot create {} ({})",
                path.display(),
                io_errno_name(&e)
            ))
        })?;
    let target = bytes.saturating_mul(2);
    let chunk = vec![b'x'; FSIZE_CHUNK_BYTES];
    let mut written = 0u64;
    let mut error = None;
    while written < target {
        let n = usize::try_from(target - written)
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        match f.write(&chunk[..n]) {
            Ok(0) => break,
            Ok(k) => written += k as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let len = f
        .metadata()
        .map_err(|e| ProbeError(format!("fstat {} ({})", path.display(), io_errno_name(&e))))?
        .len();
    let detail = format!(
        "tried to write {target} bytes to {}; wrote {written}, file is {len} bytes, stopped by {}",
        path.display(),
        error.as_ref().map_or("nothing".to_owned(), io_errno_name)
    );
    if len > bytes {
        return Ok(Report::Broken(detail));
    }
    match error {
        Some(e) if e.raw_os_error() == Some(libc::EFBIG) => Ok(Report::Holds(detail)),
        _ => Err(ProbeError(format!(
            "{detail}: the limit was never reached, so it was not tested"
        ))),
    }
}
