//! What a run leaves behind for the host, judged on the host — while the run lives (the
//! probe plants, then waits) and after it ended: no setuid or setgid file and no device
//! node, by any route, in any tier and backend, whoever owns the workspace.
//!
//! Regression: on Tier C (native and bwrap) and Tier B, `chmod 4755` of a copied binary
//! left `root:root -rwsr-xr-x` in a root-owned workspace (setuid-1000 in a workspace of
//! uid 1000); so did `open(O_CREAT, 04755)`, `mknod(S_IFREG|04755)`, `install -m 4755`,
//! `cp -p` and `tar -xp` of a setuid file, and `mkdir -m 2775`; `mknod` of a 0:0
//! character device and `renameat2(RENAME_WHITEOUT)` left device nodes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use tierbox_runner::Outcome;

use super::harness::{Backend, Fixture, NOBODY, Need, assert_holds, describe};

/// The seeds the host leaves for `cp -p` and `tar -xp`: a setuid file of its own and an
/// archive holding one (the host's files, which the run may read, not create).
fn seed(ws: &Path, owner: u32) {
    let seed = ws.join("seed-setuid");
    std::fs::copy("/bin/true", &seed).unwrap();
    std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let staging = tempfile::tempdir().unwrap();
    let inner = staging.path().join("tar");
    std::fs::copy("/bin/true", &inner).unwrap();
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o6755)).unwrap();
    let made = std::process::Command::new("tar")
        .arg("-cf")
        .arg(ws.join("seed.tar"))
        .arg("-C")
        .arg(staging.path())
        .arg("tar")
        .status()
        .unwrap();
    assert!(made.success(), "tar -cf of the seed archive");
    for p in [ws.to_path_buf(), seed, ws.join("seed.tar")] {
        std::os::unix::fs::chown(&p, Some(owner), Some(owner)).unwrap();
    }
}

/// Everything in the workspace (recursively, not following symlinks) that is setuid,
/// setgid or a device node, but the host's own seed.
fn privileged_entries(ws: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![ws.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p.clone());
            }
            let kind = meta.mode() & libc::S_IFMT;
            let setid = meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0;
            let device = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
            if (setid || device) && p != ws.join("seed-setuid") {
                found.push(format!(
                    "{} {:o} {}:{}",
                    p.strip_prefix(ws).unwrap().display(),
                    meta.mode(),
                    meta.uid(),
                    meta.gid()
                ));
            }
        }
    }
    found.sort();
    found
}

/// Runs the `plant-setid` probe in a workspace owned by `owner` on `backend` and checks
/// the host's view while it waits and after it ended.
async fn nothing_privileged_is_left(test: &str, backend: Backend, owner: u32) {
    let Some(mut fx) = Fixture::on(test, &[Need::Root], backend) else {
        return;
    };
    // The probe reaches the real tools (`install`, `cp`, `tar`, `mkdir`, `chmod`) by
    // absolute path: the fixture's policy allows only the probe as the command.
    fx.policy.limits.timeout_ms = 30_000;
    seed(&fx.workspace, owner);
    let (ready, release) = (fx.workspace.join("ready"), fx.workspace.join("release"));
    let dir = fx.workspace.display().to_string();
    let (ready_arg, release_arg) = (ready.display().to_string(), release.display().to_string());
    let args = [
        "plant-setid",
        dir.as_str(),
        ready_arg.as_str(),
        release_arg.as_str(),
    ];
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(25);
        while !ready.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let alive = privileged_entries(&fx.workspace);
        std::fs::write(&release, b"go").unwrap();
        (ready.exists(), alive)
    };
    let (o, (planted, alive)): (Outcome, _) = tokio::join!(fx.probe(&args), watch);
    assert!(planted, "the probe never got to wait:\n{}", describe(&o));
    println!("{}", o.stdout.text);
    assert!(
        alive.is_empty(),
        "{backend:?}, workspace owner {owner}: while the run lived the host saw {alive:?}\n{}",
        describe(&o)
    );
    let after = privileged_entries(&fx.workspace);
    assert!(
        after.is_empty(),
        "{backend:?}, workspace owner {owner}: after the run the host sees {after:?}\n{}",
        describe(&o)
    );
    assert_holds(&o);
    // The refusals are denials of the seccomp layer, named with their arguments where the
    // host hands them to the supervisor.
    let seccomp_denials: Vec<String> = o
        .denials
        .iter()
        .filter(|d| d.layer == tierbox_runner::denials::DenialLayer::Seccomp)
        .map(|d| format!("{} {}", d.operation, d.target))
        .collect();
    assert!(
        seccomp_denials.iter().any(|d| d.contains("setuid")),
        "no seccomp denial names a setuid mode: {seccomp_denials:?}\n{}",
        describe(&o)
    );
}

macro_rules! per_backend_and_owner {
    ($($name:ident => $backend:expr, $owner:expr;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                nothing_privileged_is_left(stringify!($name), $backend, $owner).await;
            }
        )*
    };
}

per_backend_and_owner! {
    tier_b_root_workspace_gets_no_setid_file_or_device => Backend::TierB, 0;
    tier_b_user_workspace_gets_no_setid_file_or_device => Backend::TierB, NOBODY;
    tier_c_native_root_workspace_gets_no_setid_file_or_device => Backend::Native, 0;
    tier_c_native_user_workspace_gets_no_setid_file_or_device => Backend::Native, NOBODY;
    tier_c_bwrap_root_workspace_gets_no_setid_file_or_device => Backend::Bwrap, 0;
    tier_c_bwrap_user_workspace_gets_no_setid_file_or_device => Backend::Bwrap, NOBODY;
}

/// A run takes no group from the workspace directory: in a workspace owned by `1500:0`
/// (a user's directory in root's group) it runs with a group that grants nothing, reads
/// no `root:root 0640` file, and — in Tier C — starts at all. The group is the owner's
/// primary group when the owner is an ordinary account in `/etc/passwd`, else the
/// sandbox's own unprivileged gid.
///
/// Regression: Tier B ran with `gid=0 groups=0` and read the file; Tier C failed to
/// write the user namespace's group map (`EINVAL`).
async fn no_group_is_borrowed(test: &str, backend: Backend) {
    let Some(fx) = Fixture::on(test, &[Need::Root], backend) else {
        return;
    };
    let fallback = tierbox_sandbox::linux::identity::root_workspace_ids().0.1;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let mut owners = vec![(1500u32, fallback)];
    if let Some(gid) =
        tierbox_sandbox::linux::identity::primary_gid(&passwd, 1000).filter(|&g| g != 0)
    {
        owners.push((1000, gid));
    }
    let secret = fx.workspace.join("group-secret");
    std::fs::write(&secret, "readable by group 0 only\n").unwrap();
    std::os::unix::fs::chown(&secret, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).unwrap();
    for (owner, gid) in owners {
        std::os::unix::fs::chown(&fx.workspace, Some(owner), Some(0)).unwrap();
        let o = fx.probe(&["read-denied", "group-secret"]).await;
        assert_holds(&o);
        assert_ne!(o.enforcement.gid, Some(0), "{}", describe(&o));
        if backend == Backend::TierB {
            assert_eq!(
                o.enforcement.gid,
                Some(gid),
                "owner {owner}: {}",
                describe(&o)
            );
        }
    }
}

#[tokio::test]
async fn tier_b_takes_no_group_from_the_workspace() {
    no_group_is_borrowed("tier_b_takes_no_group_from_the_workspace", Backend::TierB).await;
}

#[tokio::test]
async fn tier_c_native_takes_no_group_from_the_workspace() {
    no_group_is_borrowed(
        "tier_c_native_takes_no_group_from_the_workspace",
        Backend::Native,
    )
    .await;
}

#[tokio::test]
async fn tier_c_bwrap_takes_no_group_from_the_workspace() {
    no_group_is_borrowed(
        "tier_c_bwrap_takes_no_group_from_the_workspace",
        Backend::Bwrap,
    )
    .await;
}

/// Tier B's `TMPDIR` is bounded by `limits.disk_bytes`: a run writing 64 MiB there in
/// 1 MiB files (each under the per-file limit) stops with `ENOSPC` at the bound, the
/// outcome says `limit_hit: "disk"`, and the enforcement report names the layer.
/// Negative control: unsandboxed, the same probe writes all 64 MiB.
///
/// Regression: Tier B's `TMPDIR` was a directory on the host's disk; only the per-file
/// limit applied, and `limits.disk_bytes` was documented for Tier C only.
#[tokio::test]
async fn tier_b_tmpdir_is_bounded_by_the_disk_limit() {
    let Some(mut fx) = Fixture::new("tier_b_tmpdir_is_bounded_by_the_disk_limit", &[Need::Root])
    else {
        return;
    };
    fx.policy
        .tier
        .optional_layers
        .retain(|l| *l != tierbox_policy::Layer::Disk);
    fx.policy.limits.disk_bytes = 8 << 20;
    let o = fx.probe(&["disk-bomb", "env:TMPDIR", "67108864"]).await;
    assert_holds(&o);
    assert!(o.enforcement.disk.applied, "{}", describe(&o));
    assert_eq!(
        o.limit_hit,
        Some(tierbox_runner::LimitHit::Disk),
        "{}",
        describe(&o)
    );
    assert!(
        o.stdout.text.contains("wrote 8388608 of") || o.stdout.text.contains("wrote 7"),
        "stopped at the bound: {}",
        o.stdout.text
    );
    let host = tempfile::tempdir().unwrap();
    let out = fx.direct(&["disk-bomb", host.path().to_str().unwrap(), "67108864"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("BROKEN "),
        "the unsandboxed control: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
