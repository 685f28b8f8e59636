//! This process's mount table (`/proc/self/mountinfo`), read once and read again only
//! when the kernel says it changed.
//!
//! Two things read the table: the cgroup probe (where the hierarchies are) and Tier B's
//! check, for every run, that no other mount shows a system root (before it covers the
//! host's secrets). The kernel marks an open mount table with `POLLPRI` when a mount or
//! unmount happened in the namespace since the descriptor was opened or last polled
//! (proc(5), `/proc/pid/mounts`), so [`current`] keeps the descriptor it read and a
//! non-blocking `poll` tells whether its text still holds: exact, for a one-shot CLI and
//! a server alike, at one system call instead of the kernel printing the whole table. A
//! change between the open and the read is both in the text and marked, so it costs one
//! needless reread, never a stale table.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::event::{PollFd, PollFlags, Timespec};

/// Where the table is.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The table as last read, and the descriptor that tells whether it changed since.
struct Kept {
    file: File,
    text: Arc<str>,
}

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

/// The text of `/proc/self/mountinfo` as it is now: the last read when the kernel marks
/// no change since, else read again.
pub(crate) fn current() -> std::io::Result<Arc<str>> {
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(k) = kept.as_mut() {
        match changed(&k.file) {
            Ok(false) => return Ok(Arc::clone(&k.text)),
            Ok(true) => {
                if let Ok(text) = read_from_start(&mut k.file) {
                    k.text = text;
                    return Ok(Arc::clone(&k.text));
                }
            }
            Err(_) => {}
        }
    }
    *kept = None;
    let mut file = File::open(MOUNTINFO)?;
    let text = read_from_start(&mut file)?;
    *kept = Some(Kept {
        file,
        text: Arc::clone(&text),
    });
    Ok(text)
}

/// Whether the kernel marked the table changed since the descriptor was opened or last
/// polled (`POLLPRI`; `POLLERR` comes with it).
fn changed(file: &File) -> std::io::Result<bool> {
    let mut fds = [PollFd::new(file, PollFlags::PRI)];
    rustix::event::poll(&mut fds, Some(&Timespec::default()))?;
    Ok(fds[0].revents().intersects(PollFlags::PRI | PollFlags::ERR))
}

fn read_from_start(file: &mut File) -> std::io::Result<Arc<str>> {
    file.seek(SeekFrom::Start(0))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(Arc::from(text))
}

/// A mountinfo field with its octal escapes (`\040` for a space, `\134` for a
/// backslash) decoded; anything else, a malformed escape included, is kept as it is.
pub(crate) fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|c| (b'0'..=b'7').contains(c))
        });
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn unescape_decodes_octal_and_keeps_the_rest() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/back\134slash"), r"/back\slash");
        // Out of a byte's range, short or not octal: kept.
        assert_eq!(unescape(r"/x\777"), r"/x\777");
        assert_eq!(unescape(r"/x\04"), r"/x\04");
        assert_eq!(unescape(r"/x\09a"), r"/x\09a");
        assert_eq!(unescape(r"\\"), r"\\");
    }

    #[test]
    fn an_unchanged_table_is_not_read_again() {
        // Another test of this binary may mount meanwhile: one quiet pair is enough.
        let quiet = (0..50).any(|_| {
            let a = current().unwrap();
            let b = current().unwrap();
            Arc::ptr_eq(&a, &b)
        });
        assert!(quiet, "the table was read again on every call");
    }

    #[test]
    fn a_mount_made_after_a_read_is_in_the_next_table() {
        if !rustix::process::geteuid().is_root() {
            tierbox_test_support::skip(
                "a_mount_made_after_a_read_is_in_the_next_table",
                "mounting a tmpfs needs root",
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().to_str().unwrap().to_owned();
        let before = current().unwrap();
        assert!(!before.contains(&point));
        rustix::mount::mount(
            "none",
            dir.path(),
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .unwrap();
        let after = current().unwrap();
        rustix::mount::unmount(dir.path(), rustix::mount::UnmountFlags::DETACH).unwrap();
        assert!(
            after.contains(&point),
            "the new mount {point} is not in the table"
        );
        let gone = current().unwrap();
        assert!(
            !gone.contains(&point),
            "the removed mount {point} is still in the table"
        );
    }
}
