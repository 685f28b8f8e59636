//! What a run leaves behind for the host: a setuid or setgid file, or a device node, made
//! in the workspace by every route a program has — the `chmod` family, the creation modes
//! of `open`, `creat`, `mknod` and `openat2`, whiteouts, and the real tools that copy
//! modes (`install -m`, `cp -p`, `tar -p`, `mkdir -m`, `chmod`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sys::{self, io_errno_name};
use crate::{ProbeError, ProbeResult, Report};

/// How long the probe waits for the caller's release file.
const RELEASE_WAIT: Duration = Duration::from_secs(60);

/// `fchmodat2` (Linux 6.6), one number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;

/// `__O_TMPFILE` without the `O_DIRECTORY` that `O_TMPFILE` includes.
const O_TMPFILE_BIT: i32 = libc::O_TMPFILE & !libc::O_DIRECTORY;

/// The names the probe tries to leave a setuid/setgid file or a device node under, in
/// the directory it is given (the caller checks each on the host).
pub const PLANTED: &[&str] = &[
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "open",
    "openat",
    "creat",
    "tmpfile",
    "setgid-dir",
    "mknod-reg",
    "mknod-chr",
    "mknod-blk",
    "whiteout",
    "openat2",
    "install",
    "cp-p",
    "tar",
    "mkdir-m",
    "chmod-tool",
];

/// `plant-setid DIR READY RELEASE`: in `DIR`, tries to leave each [`PLANTED`] name as a
/// setuid/setgid file or a device node (copies of this probe where a binary is needed;
/// `DIR/seed-setuid` and `DIR/seed.tar`, made by the caller, are the sources of `cp -p`
/// and `tar -xp`), creates `READY`, and waits until `RELEASE` exists (at most a minute), so
/// the caller can look at the host while the run lives. `HOLDS` when none of them is one
/// afterwards, as seen from inside; each attempt's result is on its own line.
pub fn plant_setid(dir: &Path, ready: &Path, release: &Path) -> ProbeResult {
    let exe = std::fs::read("/proc/self/exe")
        .map_err(|e| ProbeError(format!("read /proc/self/exe: {}", io_errno_name(&e))))?;
    let at = |name: &str| dir.join(name);
    let mut lines = Vec::new();
    let mut note = |what: &str, result: Result<String, String>| {
        lines.push(format!(
            "{what}: {}",
            match result {
                Ok(s) => s,
                Err(e) => e,
            }
        ));
    };
    let copy = |name: &str| -> Result<PathBuf, String> {
        let p = at(name);
        std::fs::write(&p, &exe).map_err(|e| format!("write: {}", io_errno_name(&e)))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod 0755: {}", io_errno_name(&e)))?;
        Ok(p)
    };
    let cwd = libc::AT_FDCWD as u64;
    let sys_result = |r: sys::SysResult<libc::c_long>| match r {
        Ok(v) => Ok(format!("returned {v}")),
        Err(e) => Err(e.to_string()),
    };
    // The chmod family on a copy of this binary.
    note(
        "chmod",
        copy("chmod").and_then(|p| {
            sys_result(sys::path_call(
                "fchmodat",
                libc::SYS_fchmodat,
                [cwd, 0, 0o4755, 0, 0],
                &[(1, &p)],
            ))
        }),
    );
    note(
        "fchmod",
        copy("fchmod").and_then(|p| {
            let f = std::fs::File::open(&p).map_err(|e| io_errno_name(&e))?;
            f.set_permissions(std::fs::Permissions::from_mode(0o4755))
                .map(|()| "returned 0".to_owned())
                .map_err(|e| format!("fchmod(04755): {}", io_errno_name(&e)))
        }),
    );
    note(
        "fchmodat",
        copy("fchmodat").and_then(|p| {
            sys_result(sys::path_call(
                "fchmodat",
                libc::SYS_fchmodat,
                [cwd, 0, 0o2755, 0, 0],
                &[(1, &p)],
            ))
        }),
    );
    note(
        "fchmodat2",
        copy("fchmodat2").and_then(|p| {
            sys_result(sys::path_call(
                "fchmodat2",
                SYS_FCHMODAT2,
                [cwd, 0, 0o6755, libc::AT_SYMLINK_NOFOLLOW as u64, 0],
                &[(1, &p)],
            ))
        }),
    );
    // Creation modes: no chmod at all.
    let create = (libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC) as u64;
    note(
        "open",
        sys_result(sys::path_call(
            "openat",
            libc::SYS_openat,
            [cwd, 0, create, 0o4755, 0],
            &[(1, &at("open"))],
        )),
    );
    note(
        "openat",
        sys_result(sys::path_call(
            "openat",
            libc::SYS_openat,
            [cwd, 0, create, 0o2755, 0],
            &[(1, &at("openat"))],
        )),
    );
    #[cfg(target_arch = "x86_64")]
    note(
        "creat",
        sys_result(sys::path_call(
            "creat",
            libc::SYS_creat,
            [0, 0o4755, 0, 0, 0],
            &[(0, &at("creat"))],
        )),
    );
    let tmpfile = (O_TMPFILE_BIT | libc::O_DIRECTORY | libc::O_WRONLY) as u64;
    note(
        "tmpfile",
        match sys::path_call(
            "openat",
            libc::SYS_openat,
            [cwd, 0, tmpfile, 0o4755, 0],
            &[(1, dir)],
        ) {
            Ok(fd) => {
                let proc_path = PathBuf::from(format!("/proc/self/fd/{fd}"));
                let linked = sys::path_call(
                    "linkat",
                    libc::SYS_linkat,
                    [cwd, 0, cwd, 0, libc::AT_SYMLINK_FOLLOW as u64],
                    &[(1, &proc_path), (3, &at("tmpfile"))],
                );
                sys_result(linked)
            }
            Err(e) => Err(e.to_string()),
        },
    );
    note(
        "setgid-dir",
        match std::fs::create_dir(at("setgid-dir")) {
            Ok(()) => sys_result(sys::path_call(
                "fchmodat",
                libc::SYS_fchmodat,
                [cwd, 0, 0o2775, 0, 0],
                &[(1, &at("setgid-dir"))],
            )),
            Err(e) => Err(format!("mkdir: {}", io_errno_name(&e))),
        },
    );
    // Nodes.
    let node = |name: &str, mode: u32, dev: u64| {
        sys_result(sys::path_call(
            "mknodat",
            libc::SYS_mknodat,
            [cwd, 0, u64::from(mode), dev, 0],
            &[(1, &at(name))],
        ))
    };
    note("mknod-reg", node("mknod-reg", libc::S_IFREG | 0o4755, 0));
    note("mknod-chr", node("mknod-chr", libc::S_IFCHR | 0o644, 0));
    note(
        "mknod-blk",
        node("mknod-blk", libc::S_IFBLK | 0o600, libc::makedev(7, 0)),
    );
    note(
        "whiteout",
        match std::fs::write(at("whiteout"), b"x") {
            Ok(()) => sys_result(sys::path_call(
                "renameat2",
                libc::SYS_renameat2,
                [cwd, 0, cwd, 0, 4],
                &[(1, &at("whiteout")), (3, &at("whiteout-moved"))],
            )),
            Err(e) => Err(io_errno_name(&e)),
        },
    );
    // openat2 with a setuid creation mode (struct open_how { flags, mode, resolve }).
    note("openat2", {
        let how: [u64; 3] = [create, 0o4755, 0];
        let c = std::ffi::CString::new(at("openat2").into_os_string().into_encoded_bytes())
            .map_err(|e| e.to_string());
        c.and_then(|c| {
            // SAFETY: `c` and `how` live until the call returns; the size is `how`'s.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    libc::AT_FDCWD,
                    c.as_ptr(),
                    how.as_ptr(),
                    24usize,
                )
            };
            if ret < 0 {
                Err(format!(
                    "openat2: {}",
                    sys::errno_name(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
                ))
            } else {
                Ok(format!("returned {ret}"))
            }
        })
    });
    // Real tools that copy or set modes.
    let tool = |argv: &[&str]| -> Result<String, String> {
        let out = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(dir)
            .output()
            .map_err(|e| format!("{}: {}", argv[0], io_errno_name(&e)))?;
        let err = String::from_utf8_lossy(&out.stderr)
            .trim()
            .replace('\n', " / ");
        if out.status.success() {
            Ok(format!("exit 0 {err}"))
        } else {
            Err(format!("{}: {err}", out.status))
        }
    };
    note(
        "install",
        copy("install-src")
            .and_then(|_| tool(&["/usr/bin/install", "-m", "4755", "install-src", "install"])),
    );
    note("cp-p", tool(&["/bin/cp", "-p", "seed-setuid", "cp-p"]));
    note("tar", tool(&["/bin/tar", "-xpf", "seed.tar"]));
    note("mkdir-m", tool(&["/bin/mkdir", "-m", "2775", "mkdir-m"]));
    note(
        "chmod-tool",
        copy("chmod-tool").and_then(|_| tool(&["/bin/chmod", "u+s,g+s", "chmod-tool"])),
    );

    std::fs::write(ready, b"planted\n")
        .map_err(|e| ProbeError(format!("{}: {}", ready.display(), io_errno_name(&e))))?;
    let start = Instant::now();
    while !release.exists() && start.elapsed() < RELEASE_WAIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<String> = PLANTED
        .iter()
        .filter_map(|name| {
            let meta = std::fs::symlink_metadata(at(name)).ok()?;
            let kind = meta.mode() & libc::S_IFMT;
            (meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0
                || kind == libc::S_IFCHR
                || kind == libc::S_IFBLK)
                .then(|| format!("{name} {:o}", meta.mode()))
        })
        .collect();
    let text = lines.join("\n");
    Ok(if left.is_empty() {
        Report::Holds(format!("no setuid/setgid file or device node left\n{text}"))
    } else {
        Report::Broken(format!("left: {}\n{text}", left.join(", ")))
    })
}
