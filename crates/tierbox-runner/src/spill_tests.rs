//! Spill files: owner and mode, refusal of a planted directory, the cap reserved before
//! it is used, the lifetime, and a live file never swept.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

const MIB: u64 = 1 << 20;

fn age(path: &Path, secs: u64) {
    let file = File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(secs))
        .unwrap();
}

#[test]
fn a_spill_file_is_the_supervisor_s_own_0600_in_a_0700_directory() {
    let state = tempfile::tempdir().unwrap();
    let dir = SpillDir::open(state.path()).unwrap();
    let mut f = dir
        .create("r.stdout", MIB, "limits.file_size_bytes", 4 * MIB)
        .unwrap();
    f.write(b"out\n");
    let (path, error) = f.finish();
    assert_eq!(error, None);
    assert_eq!(std::fs::read(&path).unwrap(), b"out\n");
    let uid = rustix::process::geteuid().as_raw();
    for (p, mode) in [(&path, 0o600), (&state.path().join(SPILL_DIR), 0o700)] {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (uid, mode), "{}", p.display());
    }
    // Exclusive creation: an existing name is never opened again.
    assert!(
        dir.create("r.stdout", MIB, "limits.file_size_bytes", 4 * MIB)
            .is_err()
    );
}

#[test]
fn a_planted_or_loose_spill_directory_is_refused() {
    let state = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let spill = state.path().join(SPILL_DIR);
    std::os::unix::fs::symlink(elsewhere.path(), &spill).unwrap();
    let e = SpillDir::open(state.path()).unwrap_err();
    assert!(matches!(e, SpillError::Untrusted { .. }), "{e}");
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
    std::fs::remove_file(&spill).unwrap();
    std::fs::create_dir(&spill).unwrap();
    std::fs::set_permissions(&spill, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = SpillDir::open(state.path()).unwrap_err();
    assert!(e.to_string().contains("mode 755"), "{e}");
    if rustix::process::geteuid().is_root() {
        std::fs::set_permissions(&spill, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&spill, Some(65534), Some(65534)).unwrap();
        let e = SpillDir::open(state.path()).unwrap_err();
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }
}

/// Two files of one directory under a 3 MiB cap: the first's reserved room counts for
/// the second, which is refused while the first holds it all; the first stops at the cap
/// and says so; once finished it is cut to what it holds.
#[test]
fn the_cap_counts_reserved_room_and_stops_or_refuses_a_spill_with_its_reason() {
    let state = tempfile::tempdir().unwrap();
    let dir = SpillDir::open(state.path()).unwrap();
    let mut first = dir
        .create("a.stdout", 64 * MIB, "limits.file_size_bytes", 3 * MIB)
        .unwrap();
    let chunk = vec![7u8; 4096];
    for _ in 0..(5 * MIB / 2) / 4096 {
        first.write(&chunk);
    }
    assert_eq!(first.error(), None);
    assert_eq!(
        dir.usage().bytes,
        3 * MIB,
        "2.5 MiB written, 3 MiB reserved"
    );
    let refused = dir
        .create("b.stdout", 64 * MIB, "limits.file_size_bytes", 3 * MIB)
        .unwrap_err();
    assert!(
        matches!(refused, SpillError::Full { used, cap, .. } if used == 3 * MIB && cap == 3 * MIB)
    );
    assert!(
        refused.to_string().contains("output.spill_total_bytes"),
        "{refused}"
    );
    for _ in 0..MIB / 4096 {
        first.write(&chunk);
    }
    let (path, error) = first.finish();
    let error = error.unwrap();
    assert!(
        error.contains(&format!("first {} bytes", 3 * MIB))
            && error.contains("output.spill_total_bytes"),
        "{error}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * MIB);
    // A file below the cap's last reservation is cut back when it ends.
    let state = tempfile::tempdir().unwrap();
    let dir = SpillDir::open(state.path()).unwrap();
    let mut f = dir
        .create("c.stdout", 64 * MIB, "limits.file_size_bytes", 3 * MIB)
        .unwrap();
    f.write(b"12345");
    assert_eq!(dir.usage().bytes, MIB);
    let (path, _) = f.finish();
    assert_eq!(std::fs::metadata(path).unwrap().len(), 5);
}

#[test]
fn expired_files_are_swept_and_a_file_being_written_is_not() {
    let state = tempfile::tempdir().unwrap();
    let dir = SpillDir::open(state.path()).unwrap();
    let mut old = dir
        .create("old.stdout", MIB, "limits.file_size_bytes", 4 * MIB)
        .unwrap();
    old.write(b"old");
    let (old_path, _) = old.finish();
    let mut live = dir
        .create("live.stdout", MIB, "limits.file_size_bytes", 4 * MIB)
        .unwrap();
    live.write(b"live");
    let mut young = dir
        .create("young.stdout", MIB, "limits.file_size_bytes", 4 * MIB)
        .unwrap();
    young.write(b"young");
    let (young_path, _) = young.finish();
    age(&old_path, 120);
    age(live.path(), 120);
    let usage = dir.usage();
    assert_eq!((usage.files, usage.bytes), (3, 3 + MIB + 5));
    let empty = dir
        .create("empty.stderr", MIB, "limits.file_size_bytes", 4 * MIB)
        .unwrap();
    assert_eq!(
        dir.usage().bytes,
        3 + MIB + 5,
        "an empty stream reserves nothing"
    );
    drop(empty.finish());
    age(&state.path().join(SPILL_DIR).join("empty.stderr"), 120);
    assert_eq!(sweep_expired(state.path(), 60), 2);
    assert!(!old_path.exists() && young_path.exists() && live.path().exists());
    let (live_path, _) = live.finish();
    age(&live_path, 120);
    assert_eq!(
        dir.sweep(Duration::from_secs(60)),
        1,
        "released, it expires too"
    );
    assert!(!live_path.exists());
    // A background process's file goes with it.
    let bg = dir
        .create("bg-x.stdout", MIB, "background.spill_bytes", 4 * MIB)
        .unwrap();
    let bg_path = bg.path().to_path_buf();
    drop(bg.remove_on_drop());
    assert!(!bg_path.exists());
    assert_eq!(sweep_expired(tempfile::tempdir().unwrap().path(), 1), 0);
}
