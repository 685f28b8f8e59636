use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

fn plan_in(ws: &Path) -> Plan {
    tierbox_policy::validate::grants_plan(
        &tierbox_policy::Policy::builtin_default(),
        &tierbox_policy::ValidateContext::new(ws),
    )
    .unwrap()
}

fn credential(secret: SecretSource) -> CredentialPolicy {
    CredentialPolicy {
        name: "api".to_owned(),
        host: "api.test".to_owned(),
        header: Some("Authorization".to_owned()),
        query: None,
        env: "API_TOKEN".to_owned(),
        secret,
    }
}

fn file_secret(path: &Path) -> SecretSource {
    SecretSource {
        env: None,
        file: Some(path.to_path_buf()),
    }
}

fn reason(e: RunError) -> String {
    match e {
        RunError::Rejected(r) => {
            assert_eq!(r.code(), "egress.termination_unavailable", "{r}");
            r.to_string()
        }
        other => panic!("not a rejection: {other}"),
    }
}

/// A directory outside the workspace for secret files (the supervisor's own).
fn secrets_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

fn write_secret(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_run_without_terminated_hosts_needs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    assert!(
        prepare(&plan_in(ws.path()), SystemTime::now())
            .unwrap()
            .is_none()
    );
}

/// The sandbox's side holds the placeholder and the bundle (the host's roots, then the
/// run's CA), and nothing of the secret; the proxy's side holds the rules.
#[test]
fn the_sandbox_gets_a_placeholder_and_the_bundle_never_the_secret() {
    let ws = tempfile::tempdir().unwrap();
    let dir = secrets_dir();
    let secret_path = dir.path().join("token");
    let secret = "s3cr3t-value-for-the-bundle-test";
    write_secret(&secret_path, &format!("{secret}\n"), 0o600);
    let mut plan = plan_in(ws.path());
    plan.network.terminated.insert(
        "api.test".to_owned(),
        TerminatedHost {
            allow: vec!["GET /repos/*".to_owned()],
            credentials: vec![credential(file_secret(&secret_path))],
        },
    );
    let t = prepare(&plan, SystemTime::now()).unwrap().unwrap();
    let [(var, placeholder)] = t.trust.placeholders.as_slice() else {
        panic!("{:?}", t.trust.placeholders)
    };
    assert_eq!(var, "API_TOKEN");
    assert!(placeholder.starts_with(PLACEHOLDER_PREFIX), "{placeholder}");
    assert_eq!(placeholder.len(), PLACEHOLDER_PREFIX.len() + 32);
    assert!(!placeholder.contains(secret));
    assert!(!t.trust.bundle.contains(secret));
    assert!(!format!("{:?}", t.trust).contains(secret));
    assert!(!format!("{:?}", t.termination).contains(secret));
    let ca = t.termination.ca().cert_pem();
    assert!(t.trust.bundle.ends_with(&ca), "the run's CA comes last");
    let store = std::fs::read_to_string(tierbox_egress::tls::system_store().unwrap()).unwrap();
    assert!(t.trust.bundle.starts_with(&store), "the host's roots first");
    let host = CanonicalHost::parse("api.test").unwrap();
    let rules = t.termination.rules(&host).unwrap();
    assert_eq!(rules.credentials[0].placeholder, *placeholder);
    // A second run gets another placeholder.
    let again = prepare(&plan, SystemTime::now()).unwrap().unwrap();
    assert_ne!(again.trust.placeholders[0].1, *placeholder);
}

#[test]
fn a_secret_comes_from_the_supervisors_environment() {
    let ws = tempfile::tempdir().unwrap();
    let var = "TIERBOX_TEST_SECRET_FROM_ENV";
    let mut plan = plan_in(ws.path());
    let c = credential(SecretSource {
        env: Some(var.to_owned()),
        file: None,
    });
    plan.network.terminated.insert(
        "api.test".to_owned(),
        TerminatedHost {
            allow: Vec::new(),
            credentials: vec![c],
        },
    );
    let e = reason(prepare(&plan, SystemTime::now()).unwrap_err());
    assert!(e.contains("egress.credentials \"api\""), "{e}");
    assert!(e.contains(&format!("has no {var}")), "{e}");
    // A variable the test process has (its value is ASCII on every test host).
    let host = plan.network.terminated.get_mut("api.test").unwrap();
    host.credentials[0].secret.env = Some("PATH".to_owned());
    let t = prepare(&plan, SystemTime::now()).unwrap().unwrap();
    assert_eq!(t.trust.placeholders.len(), 1);
    let path = std::env::var("PATH").unwrap();
    assert!(!t.trust.placeholders[0].1.contains(&path));
}

/// Each rule a secret file is held to refuses with its reason, naming the entry.
#[test]
fn a_secret_file_is_refused_unless_it_is_safe_to_read_as_the_supervisor() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let dir = secrets_dir();
    let good = dir.path().join("good");
    write_secret(&good, "token\n", 0o600);
    let decoy = dir.path().join("decoy");
    write_secret(&decoy, "DECOY\n", 0o600);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&decoy, &link).unwrap();
    let writable = dir.path().join("writable");
    write_secret(&writable, "token\n", 0o620);
    let linked = dir.path().join("linked");
    write_secret(&linked, "token\n", 0o600);
    std::fs::hard_link(&linked, dir.path().join("linked2")).unwrap();
    let big = dir.path().join("big");
    write_secret(&big, &"x".repeat(MAX_SECRET_BYTES as usize + 1), 0o600);
    let crlf = dir.path().join("crlf");
    write_secret(&crlf, "to\r\nken", 0o600);
    let empty = dir.path().join("empty");
    write_secret(&empty, "\n", 0o600);
    let in_ws = ws_path.join("token");
    write_secret(&in_ws, "token\n", 0o600);
    let via_dir_link = dir.path().join("dirlink");
    std::os::unix::fs::symlink(dir.path(), &via_dir_link).unwrap();
    let cases: [(PathBuf, &str); 9] = [
        (link, "symlink"),
        (via_dir_link.join("good"), "symlink"),
        (writable, "lets others write"),
        (linked, "hard links"),
        (big, "the most read"),
        (crlf, "control character"),
        (empty, "empty"),
        (in_ws, "which the run can write"),
        (dir.path().to_path_buf(), "not a regular file"),
    ];
    for (path, want) in cases {
        let mut plan = plan_in(&ws_path);
        plan.network.terminated.insert(
            "api.test".to_owned(),
            TerminatedHost {
                allow: Vec::new(),
                credentials: vec![credential(file_secret(&path))],
            },
        );
        let e = reason(prepare(&plan, SystemTime::now()).unwrap_err());
        assert!(e.contains(want), "{}: {e}", path.display());
        assert!(e.contains("egress.credentials \"api\""), "{e}");
        assert!(!e.contains("DECOY"), "{e}");
    }
    let mut plan = plan_in(&ws_path);
    plan.network.terminated.insert(
        "api.test".to_owned(),
        TerminatedHost {
            allow: Vec::new(),
            credentials: vec![credential(file_secret(&good))],
        },
    );
    assert!(prepare(&plan, SystemTime::now()).is_ok());
}

/// A swapper thread turns the secret's name into a symlink to another file of the
/// supervisor's and back, as fast as it can, while the supervisor reads the secret: every
/// read gets the real secret or a refusal, never the other file's bytes.
#[test]
fn a_secret_file_swapped_for_a_symlink_mid_read_never_yields_another_file() {
    let dir = secrets_dir();
    let real = dir.path().join("real");
    write_secret(&real, "REAL\n", 0o600);
    let decoy = dir.path().join("decoy");
    write_secret(&decoy, "DECOY\n", 0o600);
    let name = dir.path().join("token");
    let link_tmp = dir.path().join("token.link");
    let file_tmp = dir.path().join("token.file");
    std::fs::copy(&real, &name).unwrap();
    let stop = AtomicBool::new(false);
    let ws = tempfile::tempdir().unwrap();
    let writable = [ws.path()];
    let (mut got_real, mut refused_n) = (0u32, 0u32);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(&link_tmp);
                std::os::unix::fs::symlink(&decoy, &link_tmp).unwrap();
                std::fs::rename(&link_tmp, &name).unwrap();
                std::fs::copy(&real, &file_tmp).unwrap();
                std::fs::set_permissions(&file_tmp, std::fs::Permissions::from_mode(0o600))
                    .unwrap();
                std::fs::rename(&file_tmp, &name).unwrap();
            }
        });
        // Until both sides of the race were seen (the swap is fast enough to matter),
        // within a bound.
        for _ in 0..200_000 {
            if got_real > 100 && refused_n > 100 {
                break;
            }
            match read_secret_file(&writable, &name) {
                Ok(text) => {
                    assert_eq!(text, "REAL\n", "read another file's bytes");
                    got_real += 1;
                }
                Err(why) => {
                    let why = why.to_string();
                    assert!(!why.contains("DECOY"), "{why}");
                    refused_n += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        got_real > 0 && refused_n > 0,
        "{got_real} reads, {refused_n} refusals"
    );
}
