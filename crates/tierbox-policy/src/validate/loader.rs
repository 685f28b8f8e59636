//! What the kernel runs to start a program: the interpreter of its `#!` line, or the
//! dynamic loader an ELF executable names (`PT_INTERP`). A program the sandbox can read
//! but whose loader it cannot fails at `execve` with only `ENOENT` or `EACCES`; validation
//! finds that loader here and refuses the request by name instead.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Longest `#!` line read, in bytes (the kernel's own limit is 256 since 5.1).
const MAX_SHEBANG_BYTES: usize = 256;

/// Most ELF program headers looked through for `PT_INTERP`.
const MAX_PROGRAM_HEADERS: u64 = 64;

/// Longest loader path read from `PT_INTERP`, in bytes.
const MAX_INTERP_BYTES: u64 = 256;

/// The program that starts `program`: the absolute interpreter path of its `#!` line, or
/// its ELF `PT_INTERP`. `None` for a file that has neither (a static executable, a file
/// of another format), cannot be read, or names a relative interpreter.
///
/// ```
/// let ld = tierbox_policy::validate::loader_of(std::path::Path::new("/bin/true"));
/// assert!(ld.is_some_and(|p| p.is_absolute()));
/// ```
pub fn loader_of(program: &Path) -> Option<PathBuf> {
    let mut file = open_regular(program)?;
    let mut head = [0u8; MAX_SHEBANG_BYTES];
    let n = read_up_to(&mut file, &mut head)?;
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next()?;
        let interp = line
            .split(|b| *b == b' ' || *b == b'\t')
            .find(|w| !w.is_empty())?;
        let interp = PathBuf::from(std::str::from_utf8(interp).ok()?);
        return interp.is_absolute().then_some(interp);
    }
    elf_interp(&mut file, head)
}

/// `path` opened for reading if it is a regular file. Non-blocking, so a FIFO or a device
/// put where the program was expected makes the caller find nothing instead of blocking
/// validation; a symlink is followed, as `execve` follows it (`~/.cargo/bin/cargo` is
/// one).
#[cfg(unix)]
fn open_regular(path: &Path) -> Option<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    file.metadata().ok()?.is_file().then_some(file)
}

/// `path` opened for reading if it is a regular file (no FIFOs to block on here).
#[cfg(not(unix))]
fn open_regular(path: &Path) -> Option<std::fs::File> {
    let file = std::fs::File::open(path).ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// An unsigned integer of up to 8 bytes in the file's byte order.
fn uint(bytes: &[u8], big: bool) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..bytes.len() {
        let b = if big {
            bytes[i]
        } else {
            bytes[bytes.len() - 1 - i]
        };
        v = (v << 8) | u64::from(b);
    }
    Some(v)
}

/// `PT_INTERP` of an ELF file whose first bytes are `head`.
fn elf_interp(file: &mut std::fs::File, head: &[u8]) -> Option<PathBuf> {
    if head.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match head.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let big = match head.get(5)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let int = |at: usize, len: usize| uint(head.get(at..at + len)?, big);
    // e_phoff, e_phentsize, e_phnum.
    let (phoff, phentsize, phnum) = if wide {
        (int(32, 8)?, int(54, 2)?, int(56, 2)?)
    } else {
        (int(28, 4)?, int(42, 2)?, int(44, 2)?)
    };
    let min_entry = if wide { 56 } else { 32 };
    if phentsize < min_entry || phnum == 0 {
        return None;
    }
    let mut table = vec![0u8; usize::try_from(phentsize * phnum.min(MAX_PROGRAM_HEADERS)).ok()?];
    file.seek(SeekFrom::Start(phoff)).ok()?;
    let n = read_up_to(file, &mut table)?;
    let field = |entry: &[u8], at: usize, len: usize| uint(entry.get(at..at + len)?, big);
    const PT_INTERP: u64 = 3;
    for entry in table[..n].chunks_exact(usize::try_from(phentsize).ok()?) {
        if field(entry, 0, 4)? != PT_INTERP {
            continue;
        }
        // p_offset and p_filesz.
        let (offset, size) = if wide {
            (field(entry, 8, 8)?, field(entry, 32, 8)?)
        } else {
            (field(entry, 4, 4)?, field(entry, 16, 4)?)
        };
        let mut path = vec![0u8; usize::try_from(size.min(MAX_INTERP_BYTES)).ok()?];
        file.seek(SeekFrom::Start(offset)).ok()?;
        let n = read_up_to(file, &mut path)?;
        let path = &path[..n];
        let path = path.split(|b| *b == 0).next()?;
        let path = PathBuf::from(std::str::from_utf8(path).ok()?);
        return path.is_absolute().then_some(path);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("prog");
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
        (dir, path)
    }

    /// A minimal 64-bit little-endian ELF header with one `PT_INTERP` naming `interp`.
    fn elf64(interp: &str) -> Vec<u8> {
        let mut f = vec![0u8; 64 + 56];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // ELFCLASS64
        f[5] = 1; // little endian
        f[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        f[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        f[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        let ph = 64;
        f[ph..ph + 4].copy_from_slice(&3u32.to_le_bytes()); // PT_INTERP
        let at = f.len() as u64;
        f[ph + 8..ph + 16].copy_from_slice(&at.to_le_bytes()); // p_offset
        let size = interp.len() as u64 + 1;
        f[ph + 32..ph + 40].copy_from_slice(&size.to_le_bytes()); // p_filesz
        f.extend_from_slice(interp.as_bytes());
        f.push(0);
        f
    }

    #[test]
    fn a_shebang_names_its_interpreter() {
        let (_d, p) = file_with(b"#!/opt/py/bin/python3 -u\nprint(1)\n");
        assert_eq!(loader_of(&p), Some(PathBuf::from("/opt/py/bin/python3")));
        let (_d, p) = file_with(b"#! /bin/sh\n");
        assert_eq!(loader_of(&p), Some(PathBuf::from("/bin/sh")));
        let (_d, p) = file_with(b"#!python3\n");
        assert_eq!(
            loader_of(&p),
            None,
            "a relative interpreter is not followed"
        );
    }

    #[test]
    fn an_elf_executable_names_its_dynamic_loader() {
        let (_d, p) = file_with(&elf64("/nonexistent/ld.so"));
        assert_eq!(loader_of(&p), Some(PathBuf::from("/nonexistent/ld.so")));
        let (_d, p) = file_with(&elf64("/lib64/ld-linux-x86-64.so.2"));
        assert_eq!(
            loader_of(&p),
            Some(PathBuf::from("/lib64/ld-linux-x86-64.so.2"))
        );
    }

    /// A FIFO where a program was expected is not waited on; a symlink to a script is
    /// followed to its `#!` line.
    #[test]
    fn a_fifo_is_not_opened_for_good() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o755),
            0,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loader_of(&fifo), None);
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/opt/x/python3\n").unwrap_or_else(|e| panic!("{e}"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&script, &link).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loader_of(&link), Some(PathBuf::from("/opt/x/python3")));
    }

    #[test]
    fn other_files_have_no_loader() {
        for bytes in [&b""[..], b"plain text\n", b"\x7fELF", b"\x7fELF\x09\x01"] {
            let (_d, p) = file_with(bytes);
            assert_eq!(loader_of(&p), None, "{bytes:?}");
        }
        assert_eq!(loader_of(Path::new("/nonexistent/prog")), None);
    }
}
