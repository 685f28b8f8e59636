//! A container image built locally from the host's static busybox, for the tests of the
//! container backends (nothing is pulled from a registry).

use std::path::Path;
use std::process::Command;

/// Where a statically linked busybox is looked for.
const BUSYBOX_CANDIDATES: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

/// Commands the image provides, at both `/bin` and `/usr/bin` (a run's program is the
/// path validation resolved on the host).
pub const APPLETS: &[&str] = &["sh", "ls", "touch", "cat", "id", "sleep", "mkdir", "true"];

/// A 64-bit little-endian ELF executable without a `PT_INTERP` program header (no dynamic
/// loader: it runs in an image that has no libc).
pub fn is_static_elf64(b: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| b.get(o..o + 2).map(|x| u16::from_le_bytes([x[0], x[1]]));
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .and_then(|x| <[u8; 8]>::try_from(x).ok())
            .map(u64::from_le_bytes)
    };
    if !b.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(entsize), Some(num)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    (0..usize::from(num)).all(|i| {
        let at = usize::try_from(phoff)
            .unwrap_or(usize::MAX)
            .saturating_add(i * usize::from(entsize));
        b.get(at..at.saturating_add(4))
            .is_some_and(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) != PT_INTERP)
    })
}

/// Makes `image` with `engine` (run with exactly `env`) unless it exists: a root holding
/// busybox and [`APPLETS`], `/etc/passwd` with root and nobody. `Err` says why it could
/// not (no static busybox, the engine's own message).
pub fn build_busybox_image(engine: &Path, env: &[(&str, &str)], image: &str) -> Result<(), String> {
    let cmd = || {
        let mut c = Command::new(engine);
        c.env_clear().envs(env.iter().copied());
        c
    };
    if cmd()
        .args(["image", "exists", image])
        .status()
        .is_ok_and(|s| s.success())
    {
        return Ok(());
    }
    let busybox = BUSYBOX_CANDIDATES
        .iter()
        .map(Path::new)
        .find(|p| std::fs::read(p).is_ok_and(|b| is_static_elf64(&b)))
        .ok_or(
            "no statically linked busybox to build the image from (apt-get install busybox-static)",
        )?;
    let dir = std::env::temp_dir().join(format!("tierbox-image-{}", std::process::id()));
    let root = dir.join("rootfs");
    let io = |e: std::io::Error| format!("building the image's root: {e}");
    for d in ["bin", "usr/bin", "etc", "tmp"] {
        std::fs::create_dir_all(root.join(d)).map_err(io)?;
    }
    std::fs::copy(busybox, root.join("bin/busybox")).map_err(io)?;
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).map_err(io)?;
        std::os::unix::fs::symlink("/bin/busybox", root.join("usr/bin").join(applet))
            .map_err(io)?;
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
    )
    .map_err(io)?;
    let tar = dir.join("rootfs.tar");
    let packed = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .is_ok_and(|s| s.success());
    let result = if !packed {
        Err("tar could not pack the image's root filesystem".to_owned())
    } else {
        match cmd().arg("import").arg(&tar).arg(image).output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(format!(
                "import failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => Err(format!("cannot run {}: {e}", engine.display())),
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Whether podman and the test image `image` are here (built when missing, with the
/// environment the tests run the engine with); skips `test` with the reason otherwise
/// ([`crate::skip`]: a failure under `CI=true`).
pub fn podman_with(test: &str, image: &str) -> bool {
    let podman = Path::new("/usr/bin/podman");
    if !podman.exists() {
        return !crate::skip(test, "podman is not installed");
    }
    let env = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", "/root"),
    ];
    match build_busybox_image(podman, &env, image) {
        Ok(()) => true,
        Err(e) => !crate::skip(test, &e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn static_and_dynamic_binaries_are_told_apart() {
        assert!(
            !super::is_static_elf64(&std::fs::read("/bin/ls").expect("/bin/ls")),
            "/bin/ls is dynamic"
        );
        assert!(!super::is_static_elf64(b"#!/bin/sh\n"));
    }
}
