//! Shared memory and pseudo-terminals: one policy runs Python's `multiprocessing` and
//! `openpty` in every tier.
//!
//! The policy a user writes for Tier B — `/dev/shm` writable — is what Tier C serves with
//! its own private `/dev/shm`, never the host's; `filesystem.dev_shm = "none"` leaves a run
//! without one; a pseudo-terminal pair opens and carries a line everywhere, except for a
//! Tier B run that keeps uid 0 (it could write to every terminal on the host), and
//! `TIOCSTI` stays denied on it.

use tierbox_policy::DevShm;

use super::harness::{BACKENDS, Backend, Fixture, NOBODY, Need, describe};

/// The lines of a `shm-pty` run, without the report prefix.
async fn shm_pty(fx: &Fixture, test: &str, tag: &str) -> Vec<String> {
    let o = fx.run(&fx.request(&["shm-pty", tag])).await;
    assert_eq!(o.exit_code, Some(0), "{test}: {}", describe(&o));
    o.stdout
        .text
        .lines()
        .map(|l| l.trim_start_matches("DONE shm-pty: ").to_owned())
        .collect()
}

/// The result of `what` (`shm`, `pty`, `tiocsti`) in `lines`.
fn step<'a>(test: &str, lines: &'a [String], what: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .unwrap_or_else(|| panic!("{test}: no {what} line in {lines:?}"))
}

/// Regression: Tier C native refused the `/dev/shm` grant at launch ("lies in /dev, which
/// the sandbox provides itself") though `policy check` accepted it, and Tier B had no
/// pseudo-terminal (`openpty` failed with `EACCES`).
#[tokio::test]
async fn one_policy_runs_shared_memory_and_a_pty_in_every_tier() {
    for backend in BACKENDS {
        let test = format!("one_policy_runs_shared_memory_and_a_pty_in_every_tier_{backend:?}");
        let Some(mut fx) = Fixture::on(&test, &[Need::Root], backend) else {
            continue;
        };
        // A non-root run: a Tier B run that keeps uid 0 gets no pseudo-terminal.
        fx.chown_workspace(NOBODY);
        fx.policy.filesystem.writable.push("/dev/shm".to_owned());
        let tag = format!("tierbox-test-{}-{backend:?}", std::process::id());
        let lines = shm_pty(&fx, &test, &tag).await;
        assert_eq!(step(&test, &lines, "shm"), "ok", "{test}");
        assert!(
            step(&test, &lines, "pty").starts_with("ok /dev/pts/"),
            "{test}: {lines:?}"
        );
        assert_eq!(step(&test, &lines, "tiocsti"), "EPERM", "{test}");

        // Whose /dev/shm: the run's own in every tier (Tier B under a root supervisor, as
        // here, serves the grant with its private one), never the host's.
        let host_file = std::path::PathBuf::from(format!("/dev/shm/{tag}.host"));
        std::fs::write(&host_file, "host").unwrap();
        let host_read = format!("f:{}", host_file.display());
        let o = fx
            .run(&fx.request(&["fs-ops", &tag, "d:/dev/shm", &host_read]))
            .await;
        let created_on_host = std::path::Path::new(&format!("/dev/shm/{tag}.new")).exists();
        let _ = std::fs::remove_file(format!("/dev/shm/{tag}.new"));
        let _ = std::fs::remove_file(format!("/dev/shm/{tag}.b"));
        let _ = std::fs::remove_file(&host_file);
        let out = o.stdout.text.replace("DONE fs-ops: ", "");
        assert!(
            out.lines().any(|l| l == "create /dev/shm ok"),
            "{test}: {out}"
        );
        let host_readable = out
            .lines()
            .any(|l| l == format!("read {} ok", host_file.display()));
        assert!(!created_on_host, "{test}: {out}");
        assert!(!host_readable, "{test}: {out}");
    }
}

/// `filesystem.dev_shm = "none"`: no shared memory, in any tier; pseudo-terminals stay.
#[tokio::test]
async fn dev_shm_none_leaves_a_run_without_shared_memory() {
    for backend in BACKENDS {
        let test = format!("dev_shm_none_leaves_a_run_without_shared_memory_{backend:?}");
        let Some(mut fx) = Fixture::on(&test, &[Need::Root], backend) else {
            continue;
        };
        fx.chown_workspace(NOBODY);
        fx.policy.filesystem.dev_shm = DevShm::None;
        let tag = format!("tierbox-test-none-{}-{backend:?}", std::process::id());
        let lines = shm_pty(&fx, &test, &tag).await;
        let shm = step(&test, &lines, "shm");
        let expected = if backend == Backend::TierB {
            "create EACCES"
        } else {
            "create EROFS"
        };
        assert_eq!(shm, expected, "{test}");
        assert!(
            !std::path::Path::new(&format!("/dev/shm/{tag}")).exists(),
            "{test}"
        );
        assert!(
            step(&test, &lines, "pty").starts_with("ok /dev/pts/"),
            "{test}: {lines:?}"
        );
    }
}

/// A Tier B run that keeps uid 0 (root supervisor, root-owned workspace) gets no
/// pseudo-terminal: through the host's devpts it could write to every terminal on the
/// host. The enforcement report says so; Tier C, with a devpts of its own, gives one.
#[tokio::test]
async fn a_uid0_tier_b_run_has_no_pty_and_says_so() {
    let test = "a_uid0_tier_b_run_has_no_pty_and_says_so";
    let Some(fx) = Fixture::new(test, &[Need::Root, Need::Landlock]) else {
        return;
    };
    let o = fx.run(&fx.request(&["shm-pty", "tierbox-test-uid0"])).await;
    assert_eq!(o.enforcement.uid, Some(0), "{}", describe(&o));
    assert!(
        o.stdout.text.contains("pty open /dev/ptmx EACCES"),
        "{test}: {}",
        describe(&o)
    );
    assert!(
        o.enforcement
            .landlock
            .detail
            .contains("no pseudo-terminals"),
        "{test}: {}",
        describe(&o)
    );
}

/// A root supervisor's Tier B run has a `/tmp` of its own: a host file in `/tmp` outside
/// its grants does not exist for it, what it writes to `/tmp` never reaches the host, and
/// a workspace that lies in the host's `/tmp` is still there, writable.
///
/// Regression: Tier B had the host's `/tmp`, where landlock refused every write
/// (`EACCES`), so a program writing `/tmp/…` directly failed.
#[tokio::test]
async fn a_root_supervisors_tier_b_run_has_a_tmp_of_its_own() {
    let test = "a_root_supervisors_tier_b_run_has_a_tmp_of_its_own";
    let ws = tempfile::Builder::new()
        .prefix("tierbox-probe-ws-")
        .tempdir_in("/tmp")
        .unwrap();
    let Some(fx) = Fixture::in_workspace(test, &[Need::Root, Need::Landlock], ws.path()) else {
        return;
    };
    let tag = format!("tierbox-test-tmp-{}", std::process::id());
    let host_file = std::path::PathBuf::from(format!("/tmp/{tag}.host"));
    std::fs::write(&host_file, "host").unwrap();
    let host_read = format!("f:{}", host_file.display());
    let ws_dir = format!("d:{}", fx.workspace.display());
    let o = fx
        .run(&fx.request(&["fs-ops", &tag, "d:/tmp", &host_read, &ws_dir]))
        .await;
    let on_host = ["new", "b"]
        .iter()
        .any(|s| std::path::Path::new(&format!("/tmp/{tag}.{s}")).exists());
    for s in ["new", "b"] {
        let _ = std::fs::remove_file(format!("/tmp/{tag}.{s}"));
    }
    let _ = std::fs::remove_file(&host_file);
    let out = o.stdout.text.replace("DONE fs-ops: ", "");
    assert!(out.lines().any(|l| l == "create /tmp ok"), "{test}: {out}");
    assert!(!on_host, "{test}: the run wrote the host's /tmp: {out}");
    assert!(
        out.lines()
            .any(|l| l == format!("read {} ENOENT", host_file.display())),
        "{test}: the host's /tmp is visible: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l == format!("create {} ok", fx.workspace.display())),
        "{test}: the workspace in the host's /tmp: {out}"
    );
    assert!(fx.workspace.join(format!("{tag}.new")).exists(), "{test}");
}

/// Runs that follow each other on one warm slot (a long-lived supervisor reuses a slot,
/// and with it, pooled, the launcher thread that holds the private `/tmp` and `/dev/shm`
/// in its mount namespace) each find both empty of what the run before wrote, while the
/// host's `/tmp` and `/dev/shm` stay untouched and unseen; a workspace beneath the host's
/// `/tmp` (bound back onto a mount point in the slot's tmp, which the slot keeps) is there
/// and writable in every run.
#[tokio::test]
async fn runs_on_one_slot_do_not_see_each_others_tmp_or_shm() {
    let test = "runs_on_one_slot_do_not_see_each_others_tmp_or_shm";
    if let Some(fx) = Fixture::new(test, &[Need::Root, Need::Landlock]) {
        rounds_on_one_slot(test, fx).await;
    }
    let ws = tempfile::Builder::new()
        .prefix("tierbox-probe-ws-")
        .tempdir_in("/tmp")
        .unwrap();
    if let Some(fx) = Fixture::in_workspace(test, &[Need::Root, Need::Landlock], ws.path()) {
        rounds_on_one_slot(test, fx).await;
    }
}

async fn rounds_on_one_slot(test: &str, mut fx: Fixture) {
    fx.policy.filesystem.writable.push("/dev/shm".to_owned());
    let tag = format!("tierbox-test-slot-{}", std::process::id());
    let left = [format!("/tmp/{tag}.new"), format!("/dev/shm/{tag}.new")];
    let ws = fx.workspace.display().to_string();
    for round in 0..3 {
        // What the round before left, read first; then written again.
        let mut args = vec!["fs-ops".to_owned(), tag.clone()];
        args.extend(left.iter().map(|f| format!("f:{f}")));
        args.extend(["d:/tmp", "d:/dev/shm", &format!("d:{ws}")].map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = fx.run(&fx.request(&args)).await;
        let out = o.stdout.text.replace("DONE fs-ops: ", "");
        for f in &left {
            assert!(
                out.lines().any(|l| l == format!("read {f} ENOENT")),
                "{test}: round {round} sees {f}: {out}"
            );
            let on_host = std::path::Path::new(f).exists();
            let _ = std::fs::remove_file(f);
            assert!(!on_host, "{test}: round {round} wrote the host's {f}");
        }
        for d in ["/tmp", "/dev/shm", &ws] {
            assert!(
                out.lines().any(|l| l == format!("create {d} ok")),
                "{test}: round {round}: {out}"
            );
        }
        let private = o
            .enforcement
            .namespaces
            .iter()
            .any(|n| n.starts_with("mount: a private /tmp"));
        assert!(private, "{test}: {}", describe(&o));
        if crate::POOLED {
            assert!(
                o.enforcement
                    .seccomp
                    .detail
                    .contains("inherited from the launcher thread"),
                "{test}: a warm slot's run restricts itself: {}",
                o.enforcement.seccomp.detail
            );
        }
    }
}
