//! Landlock tests: the pure ABI plan, and a ruleset enforced in a forked child.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use super::*;
use crate::linux::sys::test_support as ts;

fn spec(read_only: Vec<PathBuf>, read_write: Vec<PathBuf>) -> LandlockSpec {
    LandlockSpec {
        read_only,
        read_write,
        scope_signals: true,
        scope_abstract_unix: true,
        tcp_connect_ports: Some(vec![]),
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

#[test]
fn plan_reports_what_an_old_abi_lacks() {
    let s = spec(vec![], vec![]);
    assert_eq!(
        RulesetPlan::new(&s, 7).status,
        LandlockStatus::FullyEnforced
    );
    assert_eq!(
        RulesetPlan::new(&s, 6).status,
        LandlockStatus::FullyEnforced
    );
    let at5 = RulesetPlan::new(&s, 5);
    assert_eq!(
        at5.status,
        LandlockStatus::PartiallyEnforced {
            missing: vec!["scope_abstract_unix", "scope_signals"]
        }
    );
    assert_eq!(at5.scoped, 0);
    let at3 = RulesetPlan::new(&s, 3);
    assert_eq!(
        at3.status,
        LandlockStatus::PartiallyEnforced {
            missing: vec!["ioctl_dev", "tcp", "scope_abstract_unix", "scope_signals"]
        }
    );
    assert_eq!(at3.handled_net, 0);
    assert_eq!(RulesetPlan::new(&s, 1).handled_fs, access_fs::ABI1_ALL);
    // ABI 1's thirteen rights, named one by one, are the low thirteen bits.
    assert_eq!(access_fs::ABI1_ALL, (1 << 13) - 1);
    // Not asking for a feature means its absence is not "missing".
    let plain = LandlockSpec {
        scope_signals: false,
        scope_abstract_unix: false,
        tcp_connect_ports: None,
        ..s
    };
    assert_eq!(
        RulesetPlan::new(&plain, 5).status,
        LandlockStatus::FullyEnforced
    );
    assert_eq!(RulesetPlan::new(&plain, 7).handled_net, 0);
    assert_eq!(fs_rights_for_abi(7), (1 << 16) - 1);
}

#[test]
fn probe_finds_this_kernels_abi() {
    let abi = probe_abi().expect("landlock must be enabled on this host");
    assert!(abi >= 1);
}

#[test]
fn prepare_skips_missing_paths_and_accepts_device_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("does/not/exist");
    let s = spec(
        vec![PathBuf::from("/usr"), missing.clone()],
        vec![dir.path().to_owned(), PathBuf::from("/dev/null")],
    );
    let prepared = PreparedLandlock::prepare(&s).unwrap();
    assert_eq!(prepared.skipped, vec![missing]);
    assert!(prepared.raw_fd() >= 0);
    assert!(prepared.abi >= 1);
    if prepared.abi >= 6 {
        assert_eq!(prepared.status, LandlockStatus::FullyEnforced);
    }
}

#[test]
fn prepare_at_lower_abi_reports_partial() {
    let s = spec(vec![PathBuf::from("/usr")], vec![]);
    let prepared = PreparedLandlock::prepare_at_abi(&s, 3).unwrap();
    assert!(matches!(
        prepared.status,
        LandlockStatus::PartiallyEnforced { .. }
    ));
    assert_eq!(prepared.handled_net, 0);
}

/// Enforced in a forked child: reads of granted trees work; writes only in the workspace
/// and /dev/null; everything else, signals outside and TCP are denied.
#[test]
fn ruleset_enforced_in_a_forked_child() {
    let Some(abi) = probe_abi() else {
        panic!("landlock must be enabled on this host");
    };
    let work = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"s").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open_port = listener.local_addr().unwrap().port();
    let allowed_port = {
        // A port with no listener that the rules allow: connect must get ECONNREFUSED,
        // not EACCES.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };

    let s = LandlockSpec {
        read_only: vec![
            "/usr".into(),
            "/etc".into(),
            "/bin".into(),
            "/lib".into(),
            "/lib64".into(),
        ],
        read_write: vec![work.path().to_owned(), "/dev/null".into()],
        scope_signals: true,
        scope_abstract_unix: true,
        tcp_connect_ports: Some(vec![allowed_port]),
    };
    let prepared = PreparedLandlock::prepare(&s).unwrap();
    let fd = prepared.raw_fd();

    let new_file = cstr(&work.path().join("new"));
    let passwd = cstr(Path::new("/etc/passwd"));
    let secret = cstr(&outside.path().join("secret"));
    let outside_new = cstr(&outside.path().join("new"));
    let dev_null = cstr(Path::new("/dev/null"));
    let root_dir = cstr(Path::new("/"));

    let code = ts::fork_with(|| {
        if sys::set_no_new_privs().is_err() {
            return 10;
        }
        if sys::landlock_restrict_self(fd, 0).is_err() {
            return 11;
        }
        let wr = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
        match ts::open(&new_file, wr) {
            Ok(f) => ts::close(f),
            Err(_) => return 12,
        }
        match ts::open(&passwd, libc::O_RDONLY | libc::O_CLOEXEC) {
            Ok(f) => ts::close(f),
            Err(_) => return 13,
        }
        if ts::open(&passwd, libc::O_WRONLY | libc::O_CLOEXEC) != Err(libc::EACCES) {
            return 14;
        }
        if ts::open(&secret, libc::O_RDONLY | libc::O_CLOEXEC) != Err(libc::EACCES) {
            return 15;
        }
        if ts::open(&outside_new, wr) != Err(libc::EACCES) {
            return 16;
        }
        match ts::open(&dev_null, libc::O_WRONLY | libc::O_CLOEXEC) {
            Ok(f) => ts::close(f),
            Err(_) => return 17,
        }
        if ts::open(
            &root_dir,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        ) != Err(libc::EACCES)
        {
            return 18;
        }
        if abi >= 6 && ts::kill(1, 0) != Err(libc::EPERM) {
            return 19;
        }
        if abi >= 4 {
            if ts::connect_tcp_loopback(open_port) != Err(libc::EACCES) {
                return 20;
            }
            if ts::connect_tcp_loopback(allowed_port) != Err(libc::ECONNREFUSED) {
                return 21;
            }
        }
        0
    });
    drop(listener);
    assert_eq!(code, 0, "child failed at step {code}");
    assert!(work.path().join("new").exists());
}
