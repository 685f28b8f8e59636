#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use tierbox_policy::{Policy, ValidateContext};

use super::*;

/// A workspace (canonical) and a face of it under `policy`, in `mode`.
fn face_with(
    policy: &Policy,
    mode: Option<WorkspaceMode>,
) -> (tempfile::TempDir, PathBuf, FileFace) {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let face = open(policy, &ws, mode);
    (dir, ws, face)
}

fn open(policy: &Policy, ws: &Path, mode: Option<WorkspaceMode>) -> FileFace {
    let ctx = ValidateContext::new(ws);
    let plan = tierbox_policy::validate::workspace_plan(policy, &ctx, None, mode).unwrap();
    FileFace::open(&plan).unwrap()
}

fn face() -> (tempfile::TempDir, PathBuf, FileFace) {
    face_with(&Policy::builtin_default(), None)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn code<T: std::fmt::Debug>(r: Result<T, FileError>) -> &'static str {
    r.unwrap_err().code()
}

fn rule<T: std::fmt::Debug>(r: Result<T, FileError>) -> Option<PathRule> {
    r.unwrap_err().rule()
}

/// What `dir` holds, by name.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn writes_land_in_the_workspace_with_its_owner_and_the_mode_asked_or_kept() {
    let (_d, ws, _) = face();
    let owner = if is_root() {
        (1234, 1234)
    } else {
        (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        )
    };
    if is_root() {
        std::os::unix::fs::chown(&ws, Some(owner.0), Some(owner.1)).unwrap();
    }
    let face = open(&Policy::builtin_default(), &ws, None);
    let w = face
        .write("a.txt", b"hello\n", WriteOptions::default())
        .unwrap();
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"hello\n");
    let meta = std::fs::metadata(ws.join("a.txt")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), owner);
    assert_eq!(meta.mode() & 0o7777, DEFAULT_FILE_MODE);
    assert_eq!(
        (w.uid, w.gid, w.mode, w.size, w.bytes_written),
        (owner.0, owner.1, 0o644, 6, 6)
    );
    assert!(w.created && !w.appended);
    assert_eq!(w.sha256, tierbox_attest::sha256_hex(b"hello\n"));

    // An existing file keeps its mode; a mode asked for is set.
    std::fs::set_permissions(ws.join("a.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let w = face
        .write("a.txt", b"again", WriteOptions::default())
        .unwrap();
    assert_eq!((w.mode, w.created), (0o600, false));
    assert_eq!(
        std::fs::metadata(ws.join("a.txt")).unwrap().mode() & 0o7777,
        0o600
    );
    let w = face
        .write(
            "run.sh",
            b"#!/bin/sh\n",
            WriteOptions {
                mode: Some(0o755),
                ..WriteOptions::default()
            },
        )
        .unwrap();
    assert_eq!(
        std::fs::metadata(ws.join("run.sh")).unwrap().mode() & 0o7777,
        0o755
    );
    assert_eq!(w.mode, 0o755);

    // Missing directories only with mkdir_parents; they are the owner's too.
    assert_eq!(
        code(face.write("new/deep/f", b"x", WriteOptions::default())),
        "file.not_found"
    );
    assert!(!ws.join("new").exists());
    let opts = WriteOptions {
        mkdir_parents: true,
        ..WriteOptions::default()
    };
    face.write("new/deep/f", b"x", opts).unwrap();
    for d in ["new", "new/deep"] {
        let m = std::fs::metadata(ws.join(d)).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (owner.0, owner.1, NEW_DIRECTORY_MODE),
            "{d}"
        );
    }
    // Without create, only an existing file is replaced.
    let replace_only = WriteOptions {
        create: false,
        ..WriteOptions::default()
    };
    assert_eq!(
        code(face.write("absent.txt", b"x", replace_only)),
        "file.not_found"
    );
    face.write("a.txt", b"replaced", replace_only).unwrap();
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"replaced");
    // No temporary file is left behind.
    assert!(
        names(&ws).iter().all(|n| !n.starts_with(TEMP_PREFIX)),
        "{:?}",
        names(&ws)
    );
}

#[test]
fn a_write_replaces_the_file_whole_and_an_append_is_a_copy() {
    let (_d, ws, face) = face();
    std::fs::write(ws.join("log"), b"one\n").unwrap();
    // A hard link made elsewhere keeps what the file had: it is replaced, not changed.
    std::fs::hard_link(ws.join("log"), ws.join("log.link")).unwrap();
    let opts = WriteOptions {
        append: true,
        ..WriteOptions::default()
    };
    let w = face.write("log", b"two\n", opts).unwrap();
    assert_eq!(std::fs::read(ws.join("log")).unwrap(), b"one\ntwo\n");
    assert_eq!(std::fs::read(ws.join("log.link")).unwrap(), b"one\n");
    assert_eq!((w.bytes_written, w.size, w.appended), (4, 8, true));
    assert_eq!(w.sha256, tierbox_attest::sha256_hex(b"one\ntwo\n"));
    // An append to a missing file makes it.
    let w = face.write("fresh", b"x", opts).unwrap();
    assert!(w.created && !w.appended);
}

#[test]
fn reads_return_the_bytes_the_size_and_whether_the_file_goes_on() {
    let (_d, ws, face) = face();
    let big: Vec<u8> = (0..(MAX_FILE_READ_BYTES + 1000))
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    let r = face.read("big.bin", 0, MAX_FILE_READ_BYTES).unwrap();
    assert_eq!(
        (r.size, r.offset, r.bytes.len(), r.truncated),
        (big.len() as u64, 0, MAX_FILE_READ_BYTES, true)
    );
    assert_eq!(r.bytes, big[..MAX_FILE_READ_BYTES]);
    let r = face
        .read("big.bin", MAX_FILE_READ_BYTES as u64, MAX_FILE_READ_BYTES)
        .unwrap();
    assert_eq!((r.bytes.len(), r.truncated), (1000, false));
    assert_eq!(r.bytes, big[MAX_FILE_READ_BYTES..]);
    // Exactly the size asked: not truncated.
    std::fs::write(ws.join("ten"), b"0123456789").unwrap();
    let r = face.read("ten", 0, 10).unwrap();
    assert_eq!(
        (r.bytes.as_slice(), r.truncated),
        (&b"0123456789"[..], false)
    );
    let r = face.read("ten", 4, 3).unwrap();
    assert_eq!((r.bytes.as_slice(), r.truncated), (&b"456"[..], true));
    let r = face.read("ten", 99, 3).unwrap();
    assert_eq!((r.bytes.len(), r.truncated), (0, false));
    for bad in [0, MAX_FILE_READ_BYTES + 1] {
        assert_eq!(
            code(face.read("ten", 0, bad)),
            "input.read_size_invalid",
            "{bad}"
        );
    }
    assert_eq!(code(face.read("nothing", 0, 10)), "file.not_found");
    assert_eq!(code(face.read("ten/below", 0, 10)), "file.refused");
}

#[test]
fn paths_that_leave_the_workspace_or_are_malformed_are_refused_by_rule() {
    let (dir, ws, face) = face();
    let outside = dir.path().parent().unwrap().to_path_buf();
    let long = "a/".repeat(MAX_FILE_PATH_BYTES);
    for (path, want) in [
        ("../escape", PathRule::DotDot),
        ("a/../../escape", PathRule::DotDot),
        ("/etc/passwd", PathRule::Absolute),
        ("", PathRule::Empty),
        (".", PathRule::Empty),
        ("a\0b", PathRule::Nul),
        (long.as_str(), PathRule::TooLong),
    ] {
        assert_eq!(
            rule(face.write(path, b"x", WriteOptions::default())),
            Some(want),
            "write {path:?}"
        );
        assert_eq!(rule(face.read(path, 0, 10)), Some(want), "read {path:?}");
    }
    let name = "n".repeat(300);
    assert_eq!(
        rule(face.write(&name, b"x", WriteOptions::default())),
        Some(PathRule::TooLong)
    );
    assert_eq!(rule(face.list("../")), Some(PathRule::DotDot));
    assert_eq!(rule(face.stat("/")), Some(PathRule::Absolute));
    assert!(!outside.join("escape").exists());
    assert!(names(&ws).is_empty(), "{:?}", names(&ws));
}

#[test]
fn a_symlink_anywhere_on_the_path_is_refused_never_followed() {
    let (_d, ws, face) = face();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink(out.path(), ws.join("out")).unwrap();
    std::os::unix::fs::symlink(out.path().join("secret"), ws.join("link")).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink("..", ws.join("sub/up")).unwrap();
    let opts = WriteOptions {
        mkdir_parents: true,
        ..WriteOptions::default()
    };
    for path in ["out/x", "out/new/x", "link", "sub/up/x"] {
        assert_eq!(
            rule(face.write(path, b"pwned", opts)),
            Some(PathRule::Symlink),
            "write {path}"
        );
    }
    for path in ["out/secret", "link", "sub/up/link"] {
        assert_eq!(
            rule(face.read(path, 0, 100)),
            Some(PathRule::Symlink),
            "read {path}"
        );
    }
    assert_eq!(rule(face.list("out")), Some(PathRule::Symlink));
    assert_eq!(rule(face.stat("out/secret")), Some(PathRule::Symlink));
    // The last component is reported as what it is, not followed.
    assert_eq!(face.stat("link").unwrap().kind, FileKind::Symlink);
    assert_eq!(names(out.path()), ["secret"]);
    assert_eq!(
        std::fs::read(out.path().join("secret")).unwrap(),
        b"outside"
    );
    assert!(
        std::fs::symlink_metadata(ws.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Runs `f` on its own thread and fails if it takes more than 10 s (a FIFO opened for
/// reading would block for ever).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} hung"))
}

#[test]
fn fifos_sockets_and_devices_are_refused_without_being_opened() {
    let (_d, ws, face) = face();
    let face = Arc::new(face);
    let root = rustix::fs::open(&ws, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    rustix::fs::mknodat(&root, "fifo", FileType::Fifo, Mode::from_raw_mode(0o666), 0).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(ws.join("sock")).unwrap();
    let mut special = vec![("fifo", FileKind::Fifo), ("sock", FileKind::Socket)];
    match rustix::fs::mknodat(
        &root,
        "null",
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    ) {
        Ok(()) => special.push(("null", FileKind::CharDevice)),
        // The FIFO and the socket are still checked.
        Err(e) => {
            let _ = tierbox_test_support::skip(
                "fifos_sockets_and_devices_are_refused_without_being_opened (device part)",
                &format!("mknod of a character device is refused here: {e}"),
            );
        }
    }
    for (name, kind) in special {
        let f = face.clone();
        let read = bounded(name, move || f.read(name, 0, 10).map(|_| ()));
        match read {
            Err(FileError::NotRegular { kind: k, .. }) => assert_eq!(k, kind, "{name}"),
            other => panic!("read {name}: {other:?}"),
        }
        let f = face.clone();
        let write = bounded(name, move || {
            f.write(name, b"x", WriteOptions::default()).map(|_| ())
        });
        assert_eq!(
            write.unwrap_err().code(),
            "file.not_regular",
            "write {name}"
        );
        assert_eq!(face.stat(name).unwrap().kind, kind);
    }
    std::fs::create_dir(ws.join("dir")).unwrap();
    assert_eq!(code(face.read("dir", 0, 10)), "file.not_regular");
    assert_eq!(
        code(face.write("dir", b"x", WriteOptions::default())),
        "file.not_regular"
    );
    assert_eq!(code(face.list("fifo")), "file.not_directory");
}

#[test]
fn protected_paths_are_never_written_the_hook_and_fsmonitor_attack() {
    let mut policy = Policy::builtin_default();
    policy.filesystem.protected.push("Makefile".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), b"[core]\n").unwrap();
    std::fs::write(ws.join("Makefile"), b"all:\n").unwrap();
    std::fs::create_dir(ws.join("githooks")).unwrap();
    std::fs::create_dir(ws.join("vendor")).unwrap();
    std::fs::create_dir(ws.join("vendor/.git")).unwrap();
    let face = open(&policy, &ws, None);
    let opts = WriteOptions {
        mkdir_parents: true,
        ..WriteOptions::default()
    };
    let evil = b"[core]\n\tfsmonitor = touch /tmp/pwned\n";
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/hooks/new/hook",
        ".git/info/attributes",
        "vendor/.git/config",
        // A repository made later is one all the same.
        "elsewhere/.git/hooks/post-checkout",
        "Makefile",
    ] {
        assert_eq!(
            code(face.write(path, evil, opts)),
            "file.protected",
            "{path}"
        );
    }
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), b"[core]\n");
    assert!(names(&ws.join(".git/hooks")).is_empty());
    assert!(!ws.join("elsewhere").exists());
    // Reading them is what a run may do too.
    assert_eq!(face.read(".git/config", 0, 100).unwrap().bytes, b"[core]\n");

    // A protected entry renamed after the face was opened is still protected, by inode.
    std::fs::rename(ws.join(".git"), ws.join("plain")).unwrap();
    assert_eq!(
        code(face.write("plain/config", evil, opts)),
        "file.protected"
    );
    assert_eq!(
        code(face.write("plain/hooks/pre-commit", evil, opts)),
        "file.protected"
    );
    std::fs::rename(ws.join("plain"), ws.join(".git")).unwrap();

    // Where a protected symlink leads is protected too (git follows it).
    std::fs::remove_dir(ws.join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink("../githooks", ws.join(".git/hooks")).unwrap();
    let face = open(&policy, &ws, None);
    assert_eq!(
        code(face.write("githooks/pre-commit", evil, opts)),
        "file.protected"
    );
    assert!(names(&ws.join("githooks")).is_empty());
    face.write("src/main.rs", b"fn main() {}\n", opts).unwrap();
}

#[test]
fn setuid_setgid_and_sticky_bits_are_refused_or_dropped() {
    let (_d, ws, face) = face();
    for mode in [0o4755, 0o2755, 0o1777, 0o10644] {
        assert_eq!(
            code(face.write(
                "s",
                b"x",
                WriteOptions {
                    mode: Some(mode),
                    ..WriteOptions::default()
                }
            )),
            "file.mode_refused",
            "{mode:o}"
        );
    }
    assert!(!ws.join("s").exists());
    std::fs::write(ws.join("suid"), b"old").unwrap();
    std::fs::set_permissions(ws.join("suid"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    let w = face.write("suid", b"new", WriteOptions::default()).unwrap();
    assert_eq!(w.mode, 0o755);
    assert_eq!(
        std::fs::metadata(ws.join("suid")).unwrap().mode() & 0o7777,
        0o755
    );
}

#[test]
fn writes_past_the_limits_are_refused_and_change_nothing() {
    let (_d, ws, face) = face();
    let big = vec![b'x'; MAX_FILE_WRITE_BYTES + 1];
    let e = face
        .write("big", &big, WriteOptions::default())
        .unwrap_err();
    assert_eq!(e.code(), "file.too_large");
    assert!(e.to_string().contains("MAX_FILE_WRITE_BYTES"), "{e}");
    assert!(!ws.join("big").exists());
    face.write("exact", &big[1..], WriteOptions::default())
        .unwrap();
    // An append past MAX_APPENDED_FILE_BYTES leaves the file as it was.
    let f = std::fs::File::create(ws.join("huge")).unwrap();
    f.set_len(MAX_APPENDED_FILE_BYTES).unwrap();
    let opts = WriteOptions {
        append: true,
        ..WriteOptions::default()
    };
    assert_eq!(code(face.write("huge", b"x", opts)), "file.too_large");
    assert_eq!(
        std::fs::metadata(ws.join("huge")).unwrap().len(),
        MAX_APPENDED_FILE_BYTES
    );
    assert!(
        names(&ws).iter().all(|n| !n.starts_with(TEMP_PREFIX)),
        "{:?}",
        names(&ws)
    );
}

#[test]
fn review_mode_writes_are_staged_never_made_and_reads_see_the_workspace() {
    let (_d, ws, face) = face_with(&Policy::builtin_default(), Some(WorkspaceMode::Overlay));
    assert!(face.in_review_mode());
    std::fs::write(ws.join("a"), b"seen").unwrap();
    // The plain write refuses; staging touches nothing.
    assert_eq!(
        code(face.write("a", b"x", WriteOptions::default())),
        "file.review_mode"
    );
    let staged = face.stage("a", b"x", WriteOptions::default()).unwrap();
    assert_eq!(
        (staged.content.as_slice(), staged.created),
        (&b"x"[..], false)
    );
    let staged = face.stage("b", b"x", WriteOptions::default()).unwrap();
    assert!(staged.created);
    assert_eq!(std::fs::read(ws.join("a")).unwrap(), b"seen");
    assert!(!ws.join("b").exists());
    assert_eq!(face.read("a", 0, 10).unwrap().bytes, b"seen");
    // A direct face does not stage.
    let (_d2, _ws2, direct) = self::face();
    assert_eq!(
        code(direct.stage("a", b"x", WriteOptions::default())),
        "file.not_staged"
    );
    // Under an overlay policy a request cannot ask for direct.
    let mut policy = Policy::builtin_default();
    policy.workspace.mode = WorkspaceMode::Overlay;
    let ctx = ValidateContext::new(&ws);
    let e =
        tierbox_policy::validate::workspace_plan(&policy, &ctx, None, Some(WorkspaceMode::Direct))
            .unwrap_err();
    assert_eq!(e.code(), "workspace.mode_widened");
    assert!(open(&policy, &ws, None).in_review_mode());
}

/// A review mode write through [`keep::keep`] (what `Runner::write_file` does there).
fn keep_write(
    state: &Path,
    face: &FileFace,
    path: &str,
    data: &[u8],
    options: WriteOptions,
) -> Result<FileWritten, FileError> {
    let staged = face.stage(path, data, options)?;
    keep::keep(state, "http:test", face, path, staged, data)
}

#[test]
fn a_review_mode_write_is_a_change_set_that_applies_as_a_runs_does() {
    use crate::changes::ChangeKind;
    use crate::review::ChangeStore;
    let (_d, ws, face) = face_with(&Policy::builtin_default(), Some(WorkspaceMode::Overlay));
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::set_permissions(ws.join("src"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::write(ws.join("src/a.txt"), b"old\n").unwrap();
    std::fs::set_permissions(ws.join("src/a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();

    // An append: the set holds the whole new file; the workspace is as it was.
    let append = WriteOptions {
        append: true,
        ..WriteOptions::default()
    };
    let w = keep_write(state.path(), &face, "src/a.txt", b"new\n", append).unwrap();
    let id = w.kept_as.clone().expect("kept as a change set");
    assert_eq!(
        (w.size, w.mode, w.created, w.appended),
        (8, 0o640, false, true)
    );
    assert_eq!(std::fs::read(ws.join("src/a.txt")).unwrap(), b"old\n");
    let store = ChangeStore::new(state.path());
    let kept = store.get(&id).unwrap();
    assert_eq!(kept.owner, "http:test");
    assert_eq!(kept.workspace, ws);
    // One change: the directory on the way kept its mode, so it is not one.
    let changes = &kept.changes.changes;
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(
        (changes[0].path.as_path(), changes[0].kind),
        (Path::new("src/a.txt"), ChangeKind::Modified)
    );
    assert_eq!(changes[0].sha256.as_deref(), Some(w.sha256.as_str()));
    // Nothing is left in the staging directory.
    assert!(names(&state.path().join(FILE_STAGING_DIR)).is_empty());

    // New directories only with mkdir_parents, and then in the set, not the workspace.
    assert_eq!(
        code(keep_write(
            state.path(),
            &face,
            "new/deep/b",
            b"b",
            WriteOptions::default()
        )),
        "file.not_found"
    );
    let parents = WriteOptions {
        mkdir_parents: true,
        ..WriteOptions::default()
    };
    let w2 = keep_write(state.path(), &face, "new/deep/b", b"b", parents).unwrap();
    assert!(w2.created);
    assert!(!ws.join("new").exists());
    let added: Vec<_> = store
        .get(w2.kept_as.as_deref().unwrap())
        .unwrap()
        .changes
        .changes;
    let added: Vec<_> = added
        .iter()
        .map(|c| (c.path.clone(), c.kind, c.mode))
        .collect();
    assert_eq!(
        added,
        [
            (
                PathBuf::from("new"),
                ChangeKind::Added,
                Some(NEW_DIRECTORY_MODE)
            ),
            (
                PathBuf::from("new/deep"),
                ChangeKind::Added,
                Some(NEW_DIRECTORY_MODE)
            ),
            (
                PathBuf::from("new/deep/b"),
                ChangeKind::Added,
                Some(DEFAULT_FILE_MODE)
            ),
        ]
    );

    // What a run may not write, a staged write may not either; nothing is kept for it.
    let before = store.list().len();
    for (path, why) in [
        (".git/config", "file.protected"),
        ("x/.git/hooks/pre-commit", "file.protected"),
        ("../out", "file.refused"),
    ] {
        assert_eq!(
            code(keep_write(state.path(), &face, path, b"x", parents)),
            why,
            "{path}"
        );
    }
    let setuid = WriteOptions {
        mode: Some(0o4755),
        ..WriteOptions::default()
    };
    assert_eq!(
        code(keep_write(state.path(), &face, "s", b"x", setuid)),
        "file.mode_refused"
    );
    // The same bytes as the workspace holds: no change, no set.
    let same = keep_write(
        state.path(),
        &face,
        "src/a.txt",
        b"old\n",
        WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(same.kept_as, None);
    assert_eq!(store.list().len(), before);

    // Applied, the workspace has the file, with the workspace's owner and its mode.
    let applied = store.apply(&id, None, false).unwrap();
    assert_eq!(applied.applied, [PathBuf::from("src/a.txt")]);
    assert_eq!(std::fs::read(ws.join("src/a.txt")).unwrap(), b"old\nnew\n");
    let meta = std::fs::metadata(ws.join("src/a.txt")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!((meta.uid(), meta.gid()), face.owner());
}

#[test]
fn a_review_mode_write_over_the_caps_is_refused_and_writes_nothing() {
    let mut policy = Policy::builtin_default();
    policy.workspace.keep_changes_per_owner_bytes = 16;
    let (_d, ws, face) = face_with(&policy, Some(WorkspaceMode::Overlay));
    let state = tempfile::tempdir().unwrap();
    let e = keep_write(
        state.path(),
        &face,
        "big",
        &[b'x'; 4096],
        WriteOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.code(), "changes.over_cap", "{e}");
    assert!(e.to_string().contains("\"big\" was not written"), "{e}");
    assert!(!ws.join("big").exists());
    assert!(
        crate::review::ChangeStore::new(state.path())
            .list()
            .is_empty()
    );
    assert!(names(&state.path().join(FILE_STAGING_DIR)).is_empty());
}

#[test]
fn what_a_run_may_not_read_or_write_the_face_may_not_either() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key"), b"k").unwrap();
    std::fs::create_dir(ws.join("vendor")).unwrap();
    std::fs::write(ws.join("vendor/lib.rs"), b"v").unwrap();
    let mut policy = Policy::builtin_default();
    policy.filesystem.deny_read = vec![ws.join("secrets").display().to_string()];
    policy.filesystem.read_only = vec![ws.join("vendor").display().to_string()];
    let face = open(&policy, &ws, None);
    assert_eq!(code(face.read("secrets/key", 0, 10)), "file.denied");
    assert_eq!(code(face.stat("secrets/key")), "file.denied");
    assert_eq!(code(face.list("secrets")), "file.denied");
    assert_eq!(
        code(face.write("secrets/key", b"x", WriteOptions::default())),
        "file.denied"
    );
    assert!(
        face.list("")
            .unwrap()
            .entries
            .iter()
            .all(|e| e.name != "secrets")
    );
    assert_eq!(
        code(face.write("vendor/lib.rs", b"x", WriteOptions::default())),
        "file.read_only"
    );
    assert_eq!(face.read("vendor/lib.rs", 0, 10).unwrap().bytes, b"v");
    assert_eq!(std::fs::read(ws.join("vendor/lib.rs")).unwrap(), b"v");
}

#[test]
fn a_directory_the_workspace_owner_may_not_write_is_not_written_by_root() {
    if !is_root() {
        tierbox_test_support::skip_optional(
            "owner_may_not_write",
            "needs root to act for another owner",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::os::unix::fs::chown(&ws, Some(1234), Some(1234)).unwrap();
    std::fs::create_dir(ws.join("rootonly")).unwrap();
    std::fs::set_permissions(ws.join("rootonly"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let face = open(&Policy::builtin_default(), &ws, None);
    assert_eq!(
        code(face.write("rootonly/x", b"x", WriteOptions::default())),
        "file.not_writable"
    );
    let opts = WriteOptions {
        mkdir_parents: true,
        ..WriteOptions::default()
    };
    assert_eq!(
        code(face.write("rootonly/d/x", b"x", opts)),
        "file.not_writable"
    );
    assert!(names(&ws.join("rootonly")).is_empty());
    face.write("mine", b"x", WriteOptions::default()).unwrap();
}

#[test]
fn lists_are_sorted_bounded_and_report_truncation() {
    let (_d, ws, face) = face();
    std::fs::write(ws.join("b"), b"bb").unwrap();
    std::fs::create_dir(ws.join("a")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join("c")).unwrap();
    let l = face.list("").unwrap();
    let got: Vec<(&str, FileKind, u64)> = l
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind, e.size))
        .collect();
    assert_eq!(
        got[1..],
        [("b", FileKind::File, 2), ("c", FileKind::Symlink, 11)]
    );
    assert_eq!(got[0].1, FileKind::Directory);
    assert!(!l.truncated);
    for i in 0..MAX_LIST_ENTRIES + 5 {
        std::fs::write(ws.join("a").join(format!("f{i:05}")), b"").unwrap();
    }
    let l = face.list("a").unwrap();
    assert!(l.truncated);
    assert_eq!(l.entries.len(), MAX_LIST_ENTRIES);
    assert!(l.entries.windows(2).all(|w| w[0].name < w[1].name));
    assert_eq!(code(face.list("b")), "file.not_directory");
    let st = face.stat("").unwrap();
    assert_eq!((st.kind, st.path.as_str()), (FileKind::Directory, ""));
}

/// While the face writes `sub/x`, another thread swaps `sub` for a symlink to a directory
/// outside the workspace and back (an atomic exchange, so `sub` is always one or the
/// other): nothing is ever written outside, and every write either lands inside or is
/// refused with a typed code.
#[test]
fn swapping_a_directory_for_a_symlink_mid_write_never_writes_outside() {
    const WRITES: usize = 400;
    let (_d, ws, face) = face();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("swap")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (ws, stop) = (ws.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) && swaps < 5_000_000 {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    ws.join("sub"),
                    rustix::fs::CWD,
                    ws.join("swap"),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let (mut landed, mut refused) = (0, 0);
    for i in 0..WRITES {
        let data = format!("write {i}\n");
        match face.write("sub/x", data.as_bytes(), WriteOptions::default()) {
            Ok(_) => landed += 1,
            Err(e) => {
                assert!(
                    matches!(e.code(), "file.refused" | "file.changed" | "file.not_found"),
                    "{e}"
                );
                refused += 1;
            }
        }
        assert!(
            names(outside.path()).is_empty(),
            "written outside: {:?}",
            names(outside.path())
        );
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0);
    assert_eq!(landed + refused, WRITES);
    assert!(names(outside.path()).is_empty());
    // Whichever name the real directory has now, no temporary file is left in it.
    let real = if ws.join("sub").is_symlink() {
        ws.join("swap")
    } else {
        ws.join("sub")
    };
    assert!(names(&real).iter().all(|n| n == "x"), "{:?}", names(&real));
    println!("{landed} writes landed, {refused} refused, {swaps} swaps");
}

#[test]
fn the_runner_checks_the_workspace_by_the_scope_rules_and_audits_writes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(ws.join("app")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("audit.jsonl");
    let mut policy = Policy::builtin_default();
    policy.audit.log = Some(log.clone());
    let runner = crate::Runner::new(policy)
        .with_workspace(&ws)
        .with_options(crate::RunOptions {
            state_dir: state.path().join("state"),
        });
    assert_eq!(
        runner.file_face(Some("../"), None).unwrap_err().code(),
        "scope.workspace_subdir_invalid"
    );
    assert_eq!(
        runner
            .clone()
            .with_workspace("/")
            .file_face(None, None)
            .unwrap_err()
            .code(),
        "scope.workspace_refused"
    );
    let face = runner.file_face(Some("app"), None).unwrap();
    assert_eq!(face.workspace(), ws.join("app"));
    let request = serde_json::json!({ "path": "notes.txt", "data": "hi\n" });
    let w = runner
        .write_file(
            "session:ab",
            &face,
            "notes.txt",
            b"hi\n",
            WriteOptions::default(),
            &request,
        )
        .unwrap();
    assert_eq!(w.audit_error, None);
    assert_eq!(std::fs::read(ws.join("app/notes.txt")).unwrap(), b"hi\n");
    let text = std::fs::read_to_string(&log).unwrap();
    let event: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v.to_string().contains("file.written"))
        .unwrap_or_else(|| panic!("no file.written record: {text}"));
    let body = event.to_string();
    for want in [
        "\"path\":\"notes.txt\"",
        "\"owner\":\"session:ab\"",
        &format!("\"sha256\":\"{}\"", tierbox_attest::sha256_hex(b"hi\n")),
        &format!("\"workspace\":\"{}\"", ws.join("app").display()),
    ] {
        assert!(body.contains(want), "{want} not in {body}");
    }
    // A refused write is not recorded as written.
    let before = text.lines().count();
    let e = runner
        .write_file(
            "session:ab",
            &face,
            ".git/config",
            b"x",
            WriteOptions::default(),
            &request,
        )
        .unwrap_err();
    assert_eq!(e.code(), "file.protected");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().lines().count(),
        before
    );
}
