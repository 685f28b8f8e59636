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

/// Most bytes `no-content` reads of one file.
const NO_CONTENT_READ_CAP: u64 = 1 << 20;

/// What one route of `no-content` found.
enum Seen {
    /// The needle: the real content reached the run.
    Needle(String),
    /// Something, or nothing, without the needle.
    Nothing(String),
}

/// Reads what is at `path` (a file's first [`NO_CONTENT_READ_CAP`] bytes, a directory's
/// entry names) and looks for `needle` in it (for a directory: an entry named `needle`).
fn look_for(path: &Path, needle: &str) -> Seen {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Seen::Nothing(format!("stat {}", io_errno_name(&e))),
    };
    if meta.is_dir() {
        return match std::fs::read_dir(path) {
            Err(e) => Seen::Nothing(format!("list {}", io_errno_name(&e))),
            Ok(entries) => {
                let names: Vec<String> = entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                if names.iter().any(|n| n == needle) {
                    Seen::Needle(format!(
                        "listed {} entries, {needle:?} among them",
                        names.len()
                    ))
                } else {
                    Seen::Nothing(format!("listed {} entries, no {needle:?}", names.len()))
                }
            }
        };
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return Seen::Nothing(format!("open {}", io_errno_name(&e))),
    };
    let mut content = Vec::new();
    // The content is never printed: it may be a real secret.
    match file.take(NO_CONTENT_READ_CAP).read_to_end(&mut content) {
        Err(e) => Seen::Nothing(format!("read {}", io_errno_name(&e))),
        Ok(n)
            if content
                .windows(needle.len())
                .any(|w| w == needle.as_bytes()) =>
        {
            Seen::Needle(format!("read {n} bytes holding the secret"))
        }
        Ok(n) => Seen::Nothing(format!("read {n} bytes, none of the secret")),
    }
}

/// `no-content PATH NEEDLE`: nothing of PATH's real content reaches the run. Unlike
/// `read-denied`, PATH need not exist in the run's view (in Tier C, host paths outside the
/// grants are simply absent), and a read that succeeds is fine as long as what it returns
/// is not the real content (Tier C covers `/etc/shadow` with an empty `/dev/null`): the
/// test names a NEEDLE from the real content (for a directory: one of its entry names),
/// and every route must fail or come back without it. Routes: PATH, a symlink to it and a
/// hard link to it made in the working directory, and `/proc/self/root/PATH`.
pub fn no_content(path: &Path, needle: &str) -> ProbeResult {
    if needle.is_empty() {
        return Err(ProbeError(
            "the needle is empty: it would match anything".to_owned(),
        ));
    }
    let tag = format!("tierbox-probe-{}", std::process::id());
    let mut routes: Vec<(String, Seen)> = Vec::new();
    routes.push((path.display().to_string(), look_for(path, needle)));

    let symlink = PathBuf::from(format!("{tag}.symlink"));
    let via_symlink = match std::os::unix::fs::symlink(path, &symlink) {
        Ok(()) => look_for(&symlink, needle),
        Err(e) => Seen::Nothing(format!("symlink {}", io_errno_name(&e))),
    };
    let _ = std::fs::remove_file(&symlink);
    routes.push((format!("symlink ./{}", symlink.display()), via_symlink));

    let hardlink = PathBuf::from(format!("{tag}.hardlink"));
    let via_link = match std::fs::hard_link(path, &hardlink) {
        Ok(()) => match look_for(&hardlink, needle) {
            Seen::Needle(r) => Seen::Needle(format!("linked, {r}")),
            Seen::Nothing(r) => Seen::Nothing(format!("linked, {r}")),
        },
        Err(e) => Seen::Nothing(format!("link {}", io_errno_name(&e))),
    };
    let _ = std::fs::remove_file(&hardlink);
    routes.push((format!("hard link ./{}", hardlink.display()), via_link));

    if path.is_absolute() {
        let via_proc = Path::new("/proc/self/root").join(path.strip_prefix("/").unwrap_or(path));
        let seen = look_for(&via_proc, needle);
        routes.push((via_proc.display().to_string(), seen));
    }

    let broken = routes.iter().any(|(_, s)| matches!(s, Seen::Needle(_)));
    let text: Vec<String> = routes
        .iter()
        .map(|(route, s)| match s {
            Seen::Needle(what) => format!("{route}: SECRET REACHED ({what})"),
            Seen::Nothing(what) => format!("{route}: {what}"),
        })
        .collect();
    let text = text.join("; ");
    Ok(if broken {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// `leave-file PATH`: creates PATH (it must not exist) with a line of text, and says
/// whether that worked. The caller judges: in a private `/tmp` a success is fine, as long
/// as the file never shows up on the host.
/// `disk-bomb DIR BYTES`: writes files of 1 MiB in DIR until BYTES are written or a
/// write fails; `HOLDS` when one failed with `ENOSPC` (or `EDQUOT`) before BYTES, with
/// how much was written. Each file stays below any per-file limit.
pub fn disk_bomb(dir: &Path, bytes: u64) -> ProbeResult {
    const CHUNK: usize = 1 << 20;
    let buf = vec![0x5au8; CHUNK];
    let mut written = 0u64;
    let mut n = 0u32;
    while written < bytes {
        let path = dir.join(format!("tierbox-probe-bomb-{n}"));
        n += 1;
        let result = File::create(&path).and_then(|mut f| {
            let mut done = 0;
            while done < CHUNK {
                let k = f.write(&buf[done..])?;
                if k == 0 {
                    return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
                }
                done += k;
                written += k as u64;
            }
            f.sync_data()
        });
        if let Err(e) = result {
            let errno = e.raw_os_error().unwrap_or(0);
            let msg = format!(
                "wrote {written} of {bytes} bytes, then {}",
                io_errno_name(&e)
            );
            return Ok(if errno == libc::ENOSPC || errno == libc::EDQUOT {
                Report::Holds(msg)
            } else {
                Report::Broken(msg)
            });
        }
    }
    Ok(Report::Broken(format!(
        "wrote all {bytes} bytes in {n} files"
    )))
}

/// `mkdirs PATH...`: creates each directory (and its parents) and says how many it made
/// (the caller judges): decoy repositories, for one.
pub fn mkdirs(paths: &[String]) -> ProbeResult {
    let mut made = 0;
    for p in paths {
        match std::fs::create_dir_all(p) {
            Ok(()) => made += 1,
            Err(e) => return Ok(Report::Done(format!("mkdir {p}: {}", io_errno_name(&e)))),
        }
    }
    Ok(Report::Done(format!("made {made} directories")))
}

pub fn leave_file(path: &Path) -> ProbeResult {
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(b"left by tierbox-probe\n"));
    Ok(Report::Done(match created {
        Ok(()) => format!("created {}", path.display()),
        Err(e) => format!("create {}: {}", path.display(), io_errno_name(&e)),
    }))
}

/// The record of one mutation attempt: what, and how it went.
type Tried = Vec<(String, Result<String, String>)>;

fn tried(out: &mut Tried, what: String, result: std::io::Result<()>) -> bool {
    let ok = result.is_ok();
    out.push((
        what,
        result
            .map(|()| "SUCCEEDED".to_owned())
            .map_err(|e| io_errno_name(&e)),
    ));
    ok
}

fn verdict(attempts: &Tried, tail: &str) -> ProbeResult {
    let text: Vec<String> = attempts
        .iter()
        .map(|(what, r)| format!("{what}: {}", r.as_ref().unwrap_or_else(|e| e)))
        .collect();
    let text = format!("{}{tail}", text.join("; "));
    Ok(if attempts.iter().any(|(_, r)| r.is_ok()) {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// The proper ancestors of a relative path, shortest first (`a`, `a/b` for `a/b/c`).
fn ancestors_below_cwd(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = path
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty() && *a != Path::new("."))
        .map(Path::to_path_buf)
        .collect();
    out.reverse();
    out
}

/// Renames each existing ancestor of `path` away and, when that works, rebuilds `path`
/// (as a directory or a file) under the old name: the swap the host's git would then
/// follow. Everything that worked is undone.
fn swap_ancestors(path: &Path, as_dir: bool, tag: &str, attempts: &mut Tried) {
    for ancestor in ancestors_below_cwd(path) {
        if std::fs::symlink_metadata(&ancestor).is_err() {
            continue;
        }
        let moved = PathBuf::from(format!("{}.{tag}.moved", ancestor.display()));
        let renamed = tried(
            attempts,
            format!("rename {} away", ancestor.display()),
            std::fs::rename(&ancestor, &moved),
        );
        if !renamed {
            continue;
        }
        let rebuilt = if as_dir {
            std::fs::create_dir_all(path)
        } else {
            path.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| File::create(path).map(drop))
        };
        tried(
            attempts,
            format!("rebuild {} after that", path.display()),
            rebuilt,
        );
        let _ = std::fs::remove_dir_all(&ancestor).or_else(|_| std::fs::remove_file(&ancestor));
        let _ = std::fs::rename(&moved, &ancestor);
    }
}

/// `replace-denied PATH`: PATH, a relative path below the working directory that exists
/// (a protected path such as `.git/hooks` or `.git/config`), can be neither changed nor
/// swapped: not written (a file: append, truncate; a directory: create a file, a
/// directory or a symlink in it), not renamed away, not removed, not replaced by a file,
/// a directory or a symlink (renamed over it, or exchanged with it by
/// `renameat2(RENAME_EXCHANGE)`), and no ancestor of it can be renamed away so that a new
/// PATH is built in its place. Whatever succeeded is undone.
pub fn replace_denied(path: &Path) -> ProbeResult {
    if path.is_absolute() {
        return Err(ProbeError(format!(
            "{} is absolute; give a path relative to the working directory",
            path.display()
        )));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        ProbeError(format!(
            "cannot stat {} ({}); the target must exist",
            path.display(),
            io_errno_name(&e)
        ))
    })?;
    let is_dir = meta.is_dir();
    // A file's content, to put back if the probe managed to destroy it.
    let backup = if is_dir {
        None
    } else {
        std::fs::read(path).ok()
    };
    let restore = |p: &Path| {
        if let Some(b) = &backup {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
            let _ = std::fs::write(p, b);
        }
    };
    let tag = format!("tierbox-probe-{}", std::process::id());
    let mut attempts: Tried = Vec::new();

    if is_dir {
        let new_file = path.join(format!("{tag}.new"));
        if tried(
            &mut attempts,
            format!("create {}", new_file.display()),
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&new_file)
                .map(drop),
        ) {
            let _ = std::fs::remove_file(&new_file);
        }
        let new_dir = path.join(format!("{tag}.dir"));
        if tried(
            &mut attempts,
            format!("mkdir {}", new_dir.display()),
            std::fs::create_dir(&new_dir),
        ) {
            let _ = std::fs::remove_dir(&new_dir);
        }
        let link = path.join(format!("{tag}.symlink"));
        if tried(
            &mut attempts,
            format!("symlink {}", link.display()),
            std::os::unix::fs::symlink("/", &link),
        ) {
            let _ = std::fs::remove_file(&link);
        }
    } else {
        tried(
            &mut attempts,
            format!("append to {}", path.display()),
            OpenOptions::new()
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(b"")),
        );
        tried(
            &mut attempts,
            format!("truncate {}", path.display()),
            truncate_to_current_length(path),
        );
    }

    let moved = PathBuf::from(format!("{tag}.moved"));
    if tried(
        &mut attempts,
        format!("rename {} away", path.display()),
        std::fs::rename(path, &moved),
    ) {
        let _ = std::fs::rename(&moved, path);
    }
    if !is_dir
        && tried(
            &mut attempts,
            format!("unlink {}", path.display()),
            std::fs::remove_file(path),
        )
    {
        restore(path);
    }

    // Stand-ins: a file, a directory, and a symlink to `/` (a `.git/config` pointing
    // anywhere, a `.git/hooks` pointing to a directory the run controls).
    let file = PathBuf::from(format!("{tag}.file"));
    let dir = PathBuf::from(format!("{tag}.standin-dir"));
    let link = PathBuf::from(format!("{tag}.standin-link"));
    let made = File::create(&file)
        .map(drop)
        .and_then(|()| std::fs::create_dir(&dir))
        .and_then(|()| std::os::unix::fs::symlink("/", &link));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_dir(&dir);
        let _ = std::fs::remove_file(&link);
        return Err(ProbeError(format!(
            "cannot create stand-ins in the working directory ({}); run the probe in the workspace",
            io_errno_name(&e)
        )));
    }
    for standin in [&file, &dir, &link] {
        if tried(
            &mut attempts,
            format!("exchange {} with a {}", path.display(), standin.display()),
            sys::rename_exchange(standin, path).map_err(|e| e.source),
        ) {
            let _ = sys::rename_exchange(standin, path);
        }
    }
    // Renaming over it (a directory only replaces an empty directory).
    for standin in [&file, &link, &dir] {
        let kind_fits = (standin == &dir) == is_dir;
        if !kind_fits {
            continue;
        }
        if tried(
            &mut attempts,
            format!("rename {} over {}", standin.display(), path.display()),
            std::fs::rename(standin, path),
        ) {
            restore(path);
        }
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir(&dir);
    let _ = std::fs::remove_file(&link);

    swap_ancestors(path, is_dir, &tag, &mut attempts);
    verdict(&attempts, "")
}

/// `create-denied PATH`: PATH, a relative path below the working directory that does not
/// exist (`.git/hooks` in a workspace without `.git`), cannot be brought into existence:
/// not by `mkdir -p`, not as a file (after `mkdir -p` of its parent), and not by renaming
/// an existing ancestor away (or removing it) and building PATH in its place. Whatever
/// succeeded is undone.
pub fn create_denied(path: &Path) -> ProbeResult {
    if path.is_absolute() {
        return Err(ProbeError(format!(
            "{} is absolute; give a path relative to the working directory",
            path.display()
        )));
    }
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(ProbeError(format!(
            "{} exists; the probe needs a missing path",
            path.display()
        )));
    }
    let tag = format!("tierbox-probe-{}", std::process::id());
    // What existed before, so that only what the probe made is removed.
    let existing: Vec<PathBuf> = ancestors_below_cwd(path)
        .into_iter()
        .filter(|a| std::fs::symlink_metadata(a).is_ok())
        .collect();
    let undo = || {
        let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        for a in ancestors_below_cwd(path).iter().rev() {
            if !existing.contains(a) {
                let _ = std::fs::remove_dir(a);
            }
        }
    };
    let mut attempts: Tried = Vec::new();
    tried(
        &mut attempts,
        format!("mkdir -p {}", path.display()),
        std::fs::create_dir_all(path),
    );
    undo();
    let as_file = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map(drop)
        });
    tried(
        &mut attempts,
        format!("create file {}", path.display()),
        as_file,
    );
    undo();
    for a in &existing {
        if a.is_dir() {
            let removed = std::fs::remove_dir(a);
            if tried(&mut attempts, format!("rmdir {}", a.display()), removed) {
                let _ = std::fs::create_dir(a);
            }
        }
    }
    swap_ancestors(path, true, &tag, &mut attempts);
    let tail = match std::fs::symlink_metadata(path) {
        Ok(_) => format!(" [{} EXISTS afterwards]", path.display()),
        Err(e) => format!(" [{} afterwards: {}]", path.display(), io_errno_name(&e)),
    };
    if std::fs::symlink_metadata(path).is_ok() {
        attempts.push((
            format!("{} left behind", path.display()),
            Ok("EXISTS".to_owned()),
        ));
    }
    verdict(&attempts, &tail)
}

/// `fs-ops TAG (d:DIR | f:FILE)...`: tries, and reports one line each as
/// `OP PATH ok|ERRNO`, every operation the grant model speaks of: for a directory, list
/// it, create `TAG.new` in it (then leave it), create `TAG.del` and delete it, create
/// `TAG.a` and rename it to `TAG.b`; for a file, read it and append `TAG` to it. Always
/// reports (a failed operation is data, not a probe failure); the caller checks the host.
pub fn fs_ops(tag: &str, targets: &[String]) -> ProbeResult {
    let mut lines = Vec::new();
    let result = |r: std::io::Result<()>| match r {
        Ok(()) => "ok".to_owned(),
        Err(e) => io_errno_name(&e),
    };
    for target in targets {
        if let Some(dir) = target.strip_prefix("d:") {
            let dir = Path::new(dir);
            lines.push(format!(
                "list {} {}",
                dir.display(),
                result(std::fs::read_dir(dir).map(drop))
            ));
            let new = dir.join(format!("{tag}.new"));
            lines.push(format!(
                "create {} {}",
                dir.display(),
                result(std::fs::write(&new, tag))
            ));
            let del = dir.join(format!("{tag}.del"));
            let deleted = std::fs::write(&del, tag).and_then(|()| std::fs::remove_file(&del));
            lines.push(format!("delete {} {}", dir.display(), result(deleted)));
            let (a, b) = (dir.join(format!("{tag}.a")), dir.join(format!("{tag}.b")));
            let renamed = std::fs::write(&a, tag).and_then(|()| std::fs::rename(&a, &b));
            lines.push(format!("rename {} {}", dir.display(), result(renamed)));
        } else if let Some(file) = target.strip_prefix("f:") {
            let file = Path::new(file);
            let read = File::open(file).and_then(|mut f| {
                let mut buf = Vec::new();
                f.read_to_end(&mut buf).map(drop)
            });
            lines.push(format!("read {} {}", file.display(), result(read)));
            let appended = OpenOptions::new()
                .append(true)
                .open(file)
                .and_then(|mut f| f.write_all(tag.as_bytes()));
            lines.push(format!("write {} {}", file.display(), result(appended)));
        } else {
            return Err(ProbeError(format!("{target:?}: expected d:DIR or f:FILE")));
        }
    }
    Ok(Report::Done(lines.join("\n")))
}
