#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;

/// An overlay's two layers, built by hand in overlayfs's format.
struct Layers {
    _dir: tempfile::TempDir,
    upper: PathBuf,
    lower: PathBuf,
}

impl Layers {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        let lower = dir.path().join("lower");
        std::fs::create_dir(&upper).unwrap();
        std::fs::create_dir(&lower).unwrap();
        Self {
            _dir: dir,
            upper,
            lower,
        }
    }

    fn lower(&self, rel: &str, content: &str) -> &Self {
        write(&self.lower.join(rel), content);
        self
    }

    fn upper(&self, rel: &str, content: &str) -> &Self {
        write(&self.upper.join(rel), content);
        self
    }

    /// A whiteout (character device 0:0), as overlayfs writes for a deletion.
    fn whiteout(&self, rel: &str) -> &Self {
        let p = self.upper.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::empty(),
            rustix::fs::makedev(0, 0),
        )
        .expect("mknod of a whiteout (needs root, as overlayfs itself)");
        self
    }

    /// An opaque upper directory (`user.overlay.opaque=y`).
    fn opaque(&self, rel: &str) -> &Self {
        let p = self.upper.join(rel);
        std::fs::create_dir_all(&p).unwrap();
        rustix::fs::lsetxattr(
            &p,
            "user.overlay.opaque",
            b"y",
            rustix::fs::XattrFlags::empty(),
        )
        .expect("user xattrs on the test's filesystem");
        self
    }

    fn scan(&self) -> ChangeSet {
        scan(&self.upper, &self.lower)
    }
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn umask() -> u32 {
    let probe = tempfile::tempdir().unwrap();
    let f = probe.path().join("f");
    std::fs::write(&f, "").unwrap();
    0o666 & !(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777)
}

/// Each change's path and kind, in order.
fn kinds(set: &ChangeSet) -> Vec<(&str, ChangeKind)> {
    set.changes
        .iter()
        .map(|c| (c.path.to_str().unwrap(), c.kind))
        .collect()
}

fn find<'a>(set: &'a ChangeSet, path: &str) -> &'a Change {
    set.changes
        .iter()
        .find(|c| c.path == Path::new(path))
        .unwrap_or_else(|| panic!("no change for {path}: {set:#?}"))
}

#[test]
fn adds_modifications_deletions_and_untouched_copies() {
    let l = Layers::new();
    l.lower("kept.txt", "same\n")
        .lower("edited.txt", "before\n")
        .lower("gone.txt", "bye\n")
        .upper("kept.txt", "same\n") // copied up, not changed
        .upper("edited.txt", "after\n")
        .upper("src/new.rs", "fn main() {}\n")
        .whiteout("gone.txt");
    let set = l.scan();
    let kinds = kinds(&set);
    assert_eq!(
        kinds,
        [
            ("edited.txt", ChangeKind::Modified),
            ("gone.txt", ChangeKind::Deleted),
            ("src", ChangeKind::Added),
            ("src/new.rs", ChangeKind::Added),
        ]
    );
    let edited = find(&set, "edited.txt");
    assert_eq!(edited.size, Some(6));
    let expected = tierbox_attest::jcs::hex(&Sha256::digest(b"after\n"));
    assert_eq!(edited.sha256.as_deref(), Some(expected.as_str()));
    assert_eq!(edited.mode, Some(0o666 & !umask()));
    assert_eq!(find(&set, "gone.txt").file_type, "file");
    assert_eq!(set.bytes_written, 6 + 13);
    assert!(!set.incomplete && set.omitted == 0);
}

/// `rm -r dir && mkdir -p dir/sub && …`: the new directory is opaque and hides all the
/// old one had, at every depth.
#[test]
fn an_opaque_directory_deletes_what_it_hides() {
    let l = Layers::new();
    l.lower("dir/a", "a")
        .lower("dir/b", "b")
        .lower("dir/sub/deep", "d")
        .lower("dir/sub/kept", "k")
        .lower("dir/old/x", "x")
        .opaque("dir")
        .upper("dir/b", "new b")
        .upper("dir/sub/kept", "k");
    let set = l.scan();
    assert_eq!(find(&set, "dir/a").kind, ChangeKind::Deleted);
    // Present before and after, with other content: modified.
    assert_eq!(find(&set, "dir/b").kind, ChangeKind::Modified);
    assert_eq!(find(&set, "dir/sub/deep").kind, ChangeKind::Deleted);
    assert_eq!(find(&set, "dir/old").kind, ChangeKind::Deleted);
    assert_eq!(find(&set, "dir/old").file_type, "dir");
    let listed: Vec<&Path> = set.changes.iter().map(|c| c.path.as_path()).collect();
    assert_eq!(
        listed,
        [
            Path::new("dir/a"),
            Path::new("dir/b"),
            Path::new("dir/old"),
            Path::new("dir/sub/deep"),
        ],
        "unchanged entries and the directories themselves are not changes"
    );
}

#[test]
fn a_moved_file_is_a_rename() {
    let l = Layers::new();
    l.lower("old/name.txt", "content\n")
        .whiteout("old/name.txt")
        .upper("new/name.txt", "content\n");
    let set = l.scan();
    let moved = find(&set, "new/name.txt");
    assert_eq!(moved.kind, ChangeKind::Renamed);
    assert_eq!(
        moved.renamed_from.as_deref(),
        Some(Path::new("old/name.txt"))
    );
    assert!(
        set.changes.iter().all(|c| c.kind != ChangeKind::Deleted),
        "{set:#?}"
    );
}

#[test]
fn what_a_reviewer_must_see_is_flagged() {
    let l = Layers::new();
    l.lower(".git/config", "[core]\n")
        .lower("tool.sh", "echo\n")
        .upper(".git/config", "[core]\n\tfsmonitor = evil\n")
        .upper("vendor/.git/HEAD", "ref: refs/heads/main\n")
        .upper("tool.sh", "echo\n")
        .upper("suid", "x")
        .upper("big.bin", "");
    std::fs::set_permissions(
        l.upper.join("tool.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(
        l.upper.join("suid"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(l.upper.join("big.bin"))
        .unwrap()
        .set_len(LARGE_FILE_BYTES)
        .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", l.upper.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../../outside", l.upper.join("vendor/up-link")).unwrap();
    std::os::unix::fs::symlink("../inside.txt", l.upper.join("vendor/ok-link")).unwrap();
    let set = l.scan();
    let flags = |p: &str| find(&set, p).flags.clone();
    assert_eq!(flags(".git/config"), [ChangeFlag::GitInternal]);
    assert!(flags("vendor/.git").contains(&ChangeFlag::NewGitDir));
    assert!(flags("vendor/.git/HEAD").contains(&ChangeFlag::GitInternal));
    assert_eq!(find(&set, "tool.sh").kind, ChangeKind::Modified);
    assert!(flags("tool.sh").contains(&ChangeFlag::NewExecutable));
    assert!(flags("suid").contains(&ChangeFlag::SetuidSetgid));
    assert!(flags("big.bin").contains(&ChangeFlag::Large));
    assert!(flags("abs-link").contains(&ChangeFlag::SymlinkOutside));
    assert_eq!(
        find(&set, "abs-link").target.as_deref(),
        Some(Path::new("/etc/passwd"))
    );
    assert!(flags("vendor/up-link").contains(&ChangeFlag::SymlinkOutside));
    assert!(!flags("vendor/ok-link").contains(&ChangeFlag::SymlinkOutside));
}

#[test]
fn a_huge_change_set_is_counted_past_its_bound() {
    let l = Layers::new();
    for i in 0..MAX_CHANGES + 5 {
        l.upper(&format!("f{i:05}"), "");
    }
    let set = l.scan();
    assert_eq!(set.changes.len(), MAX_CHANGES);
    assert_eq!(set.omitted, 5);
    assert!(!set.is_empty());
}

/// The scan reads the upper layer the kernel itself writes: an overlay mounted in a user
/// namespace (`userxattr`, as a sandbox mounts it), changed by a shell inside, compared.
#[test]
fn the_kernel_s_own_upper_layer_reads_as_the_changes_made() {
    let dir = tempfile::tempdir().unwrap();
    let (lower, upper, work, merged) = (
        dir.path().join("lower"),
        dir.path().join("upper"),
        dir.path().join("work"),
        dir.path().join("merged"),
    );
    for d in [&lower, &upper, &work, &merged] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(lower.join("edit.txt"), "before\n").unwrap();
    std::fs::write(lower.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(lower.join("move.txt"), "moving\n").unwrap();
    std::fs::create_dir_all(lower.join("tree/sub")).unwrap();
    std::fs::write(lower.join("tree/sub/f"), "f\n").unwrap();
    let script = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={},userxattr {m} && \
         cd {m} && echo after > edit.txt && rm gone.txt && mv move.txt moved.txt && \
         rm -r tree && mkdir tree && echo new > tree/n && ln -s /etc/shadow leak",
        lower.display(),
        upper.display(),
        work.display(),
        m = merged.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-ec", &script])
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            if tierbox_test_support::skip_here(&format!(
                "an overlay in a user namespace could not be mounted and changed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )) {
                return;
            }
        }
        Err(e) => {
            if tierbox_test_support::skip_here(&format!("unshare(1) is not available: {e}")) {
                return;
            }
        }
    }
    let set = scan(&upper, &lower);
    let summary: Vec<(String, ChangeKind)> = set
        .changes
        .iter()
        .map(|c| (c.path.display().to_string(), c.kind))
        .collect();
    assert_eq!(
        summary,
        [
            ("edit.txt".to_owned(), ChangeKind::Modified),
            ("gone.txt".to_owned(), ChangeKind::Deleted),
            ("leak".to_owned(), ChangeKind::Added),
            ("moved.txt".to_owned(), ChangeKind::Renamed),
            ("tree/n".to_owned(), ChangeKind::Added),
            ("tree/sub".to_owned(), ChangeKind::Deleted),
        ],
        "{set:#?}"
    );
    assert_eq!(
        find(&set, "moved.txt").renamed_from.as_deref(),
        Some(Path::new("move.txt"))
    );
    assert!(
        find(&set, "leak")
            .flags
            .contains(&ChangeFlag::SymlinkOutside)
    );
    // The real workspace is untouched.
    assert_eq!(
        std::fs::read_to_string(lower.join("edit.txt")).unwrap(),
        "before\n"
    );
    assert!(lower.join("gone.txt").exists() && lower.join("tree/sub/f").exists());
}

/// A workspace symlink to a host directory, replaced by a directory in the run: the scan
/// reports the symlink deleted and the new entries added, and reads nothing through the
/// symlink (no host file listed, hashed or compared).
#[test]
fn nothing_is_read_through_a_workspace_symlink() {
    let l = Layers::new();
    let host = tempfile::tempdir().unwrap();
    write(&host.path().join("secret"), "host secret\n");
    write(&host.path().join("sub/key"), "host key\n");
    std::os::unix::fs::symlink(host.path(), l.lower.join("x")).unwrap();
    l.opaque("x").upper("x/secret", "mine\n").opaque("x/sub");
    let set = l.scan();
    let kinds = kinds(&set);
    assert_eq!(
        kinds,
        [
            ("x", ChangeKind::Deleted),
            ("x", ChangeKind::Added),
            ("x/secret", ChangeKind::Added),
            ("x/sub", ChangeKind::Added),
        ]
    );
    let secret_hash = tierbox_attest::jcs::hex(&Sha256::digest(b"host secret\n"));
    let text = serde_json::to_string(&set).unwrap();
    assert!(!text.contains(&secret_hash), "{text}");
    assert!(!text.contains("x/sub/key"), "{text}");
    assert_eq!(find(&set, "x/secret").before, None);
}

#[test]
fn each_flag_s_name_is_its_json_and_large_needs_no_consent() {
    for f in ChangeFlag::ALL {
        assert_eq!(serde_json::to_value(f).unwrap(), f.name());
        let no_consent = matches!(f, ChangeFlag::Large | ChangeFlag::ChangedDuringRun);
        assert_eq!(f.needs_consent(), !no_consent, "{f:?}");
    }
}
