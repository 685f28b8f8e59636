#![allow(clippy::unwrap_used)]

use super::parse::FailedCall;
use super::*;

/// Records as this kernel (6.18) sent them for a landlocked `cat /etc/hostname` and a
/// filtered `getppid`.
const LANDLOCK: &str = r#"audit(1795819326.661:116): domain=13719b2cf blockers=fs.read_file path="/etc/hostname" dev="vda" ino=611"#;
const SYSCALL: &str = r#"audit(1795819326.661:116): arch=c000003e syscall=257 success=no exit=-13 a0=ffffff9c a1=7fff41544ae9 a2=0 a3=0 items=0 ppid=5602 pid=5603 auid=0 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=2 comm="cat" exe="/usr/bin/cat" key=(null)"#;
const SECCOMP: &str = r#"audit(1795819303.389:109): auid=0 uid=0 gid=0 ses=1 pid=5382 comm="sc" exe="/tmp/ap/sc" sig=0 arch=c000003e syscall=101 compat=0 ip=0x7f2427085829 code=0x50000"#;

#[test]
fn records_are_parsed() {
    assert_eq!(
        parse_record(1423, LANDLOCK.as_bytes()),
        Some(Record::Landlock {
            serial: 116,
            access: "read_file".to_owned(),
            object: "/etc/hostname".to_owned(),
        })
    );
    assert_eq!(
        parse_record(1300, SYSCALL.as_bytes()),
        Some(Record::Syscall {
            serial: 116,
            ses: 2,
            failed: cfg!(target_arch = "x86_64").then_some(FailedCall {
                syscall: 257,
                errno: 13,
                args: [0xffff_ff9c, 0x7fff_4154_4ae9, 0],
            }),
        })
    );
    assert_eq!(
        parse_record(1307, br#"audit(1.2:116): cwd="/work/a""#),
        Some(Record::Cwd {
            serial: 116,
            cwd: "/work/a".to_owned()
        })
    );
    // A name with a blank is hex-encoded.
    assert_eq!(
        parse_record(
            1302,
            b"audit(1.2:116): item=0 name=2F746D702F612062 nametype=UNKNOWN cap_fp=0 cap_fi=0"
        ),
        Some(Record::Path {
            serial: 116,
            name: "/tmp/a b".to_owned(),
            nametype: "UNKNOWN".to_owned(),
        })
    );
    // A call that succeeded carries no failure.
    let ok = SYSCALL.replace("success=no exit=-13", "success=yes exit=3");
    assert!(matches!(
        parse_record(1300, ok.as_bytes()),
        Some(Record::Syscall { failed: None, .. })
    ));
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        parse_record(1326, SECCOMP.as_bytes()),
        Some(Record::Seccomp {
            ses: 1,
            syscall: 101,
            native: true
        })
    );
    assert_eq!(
        parse_record(1320, b"audit(1795819326.661:116): "),
        Some(Record::EndOfEvent { serial: 116 })
    );
    assert_eq!(
        parse_record(
            1121,
            b"audit(1.2:7): pid=1 uid=0 auid=4294967295 ses=4294967295 msg='tierbox-barrier=00000000000000ff-42'"
        ),
        Some(Record::Barrier {
            origin: 255,
            number: 42
        })
    );
}

#[test]
fn hex_encoded_paths_and_network_objects_are_read() {
    // "/tmp/a b" has a blank: the kernel hex-encodes it.
    let rec = "audit(1.2:3): domain=1 blockers=fs.write_file,fs.truncate path=2F746D702F612062 dev=\"vda\" ino=1";
    assert_eq!(
        parse_record(1423, rec.as_bytes()),
        Some(Record::Landlock {
            serial: 3,
            access: "write_file,truncate".to_owned(),
            object: "/tmp/a b".to_owned(),
        })
    );
    let rec = "audit(1.2:4): domain=1 blockers=net.connect_tcp daddr=10.0.0.1 dest=443";
    assert!(matches!(
        parse_record(1423, rec.as_bytes()),
        Some(Record::Landlock { object, .. }) if object == "10.0.0.1:443"
    ));
    let rec = "audit(1.2:5): domain=1 blockers=scope.signal opid=77 ocomm=\"sshd\"";
    assert!(matches!(
        parse_record(1423, rec.as_bytes()),
        Some(Record::Landlock { access, object, .. }) if access == "signal" && object == "pid 77 (sshd)"
    ));
}

#[test]
fn seccomp_records_of_mediated_or_allowed_calls_are_not_refusals() {
    // USER_NOTIF (the chmod hand-off) and LOG.
    for code in ["0x7fc00000", "0x7ffc0000"] {
        let rec = SECCOMP.replace("code=0x50000", &format!("code={code}"));
        assert_eq!(parse_record(1326, rec.as_bytes()), None, "{code}");
    }
    assert_eq!(parse_record(1326, b"garbage"), None);
    assert_eq!(parse_record(1423, b"audit(1.2:3): domain=1"), None);
}

#[test]
fn records_are_attributed_by_session_and_never_to_another_run() {
    let mut state = State::default();
    state.sessions.insert(2, SessionLog::default());
    state.sessions.insert(9, SessionLog::default());
    let at = Instant::now();
    for _ in 0..3 {
        state.take(parse_record(1423, LANDLOCK.as_bytes()).unwrap(), at);
        state.take(parse_record(1300, SYSCALL.as_bytes()).unwrap(), at);
        state.take(
            parse_record(1320, b"audit(1795819326.661:116): ").unwrap(),
            at,
        );
    }
    // A landlock record whose event names no registered session is dropped.
    state.take(
        parse_record(1423, LANDLOCK.replace(":116)", ":117)").as_bytes()).unwrap(),
        at,
    );
    state.take(
        parse_record(
            1300,
            SYSCALL
                .replace(":116)", ":117)")
                .replace("ses=2", "ses=5")
                .as_bytes(),
        )
        .unwrap(),
        at,
    );
    assert!(state.pending.is_empty());
    let two = &state.sessions[&2].refusals.refusals;
    assert_eq!(two.len(), 1);
    assert_eq!(
        (
            two[0].layer,
            two[0].operation.as_str(),
            two[0].target.as_str(),
            two[0].count
        ),
        (RefusalLayer::Landlock, "read_file", "/etc/hostname", 3)
    );
    assert!(state.sessions[&9].refusals.refusals.is_empty());
}

#[test]
fn a_run_keeps_at_most_max_refusals_and_counts_the_rest() {
    let mut log = SessionLog::default();
    for i in 0..MAX_REFUSALS_PER_RUN + 5 {
        log.add(
            RefusalLayer::Landlock,
            "read_file".to_owned(),
            format!("/f{i}"),
            Instant::now(),
        );
    }
    assert_eq!(log.refusals.refusals.len(), MAX_REFUSALS_PER_RUN);
    assert_eq!(log.refusals.dropped, 5);
}

/// Another supervisor on the host numbers its barriers from 1 too: only this process's
/// own barriers (its random tag) complete a wait, so a run is never declared complete
/// before its records have drained; a tag-less or malformed barrier counts for nobody.
#[test]
fn only_this_processs_barriers_count() {
    let mut state = State::default();
    let at = Instant::now();
    let other = barrier_origin().wrapping_add(1);
    state.take(
        Record::Barrier {
            origin: other,
            number: 5,
        },
        at,
    );
    assert_eq!(state.barrier, 0);
    for text in [
        format!("audit(1.2:7): pid=1 uid=0 auid=0 ses=1 msg='tierbox-barrier={other:016x}-9'"),
        "audit(1.2:7): pid=1 uid=0 auid=0 ses=1 msg='tierbox-barrier=9'".to_owned(),
        "audit(1.2:7): pid=1 uid=0 auid=0 ses=1 msg='tierbox-barrier=zz-9'".to_owned(),
    ] {
        if let Some(record) = parse_record(1121, text.as_bytes()) {
            state.take(record, at);
        }
    }
    assert_eq!(state.barrier, 0);
    let own = format!(
        "audit(1.2:7): pid=1 uid=0 auid=0 ses=1 msg='tierbox-barrier={:016x}-3'",
        barrier_origin()
    );
    state.take(parse_record(1121, own.as_bytes()).unwrap(), at);
    assert_eq!(state.barrier, 3);
}

/// A slot launcher's session is adopted by one run at a time, and never again once a
/// run ended on it before its barrier came back (late records could still arrive).
#[test]
fn a_slot_session_is_adopted_once_at_a_time_and_never_after_a_lost_barrier() {
    if watch().is_err() {
        tierbox_test_support::skip(
            "a_slot_session_is_adopted_once_at_a_time_and_never_after_a_lost_barrier",
            "no audit multicast socket (needs root)",
        );
        return;
    }
    // Far above any session id the kernel hands out during the tests.
    let ses = u32::MAX - 11;
    let first = AuditSession::adopt(ses).unwrap();
    assert!(
        AuditSession::adopt(ses).is_err(),
        "busy while a run holds it"
    );
    drop(first);
    let second = AuditSession::adopt(ses).unwrap();
    let report = EndingSession {
        session: second,
        lost: false,
        barrier: None,
    }
    .collect(false);
    assert!(!report.complete);
    assert!(session_retired(ses));
    assert!(AuditSession::adopt(ses).is_err(), "retired");
    assert!(!session_retired(ses - 1));
}

/// The denial report's text for each reason is the one clients have seen: the typed
/// reasons render exactly as the prose they replaced.
#[test]
fn reasons_render_as_before() {
    let cases = [
        (
            NotRecorded::NeedsRoot,
            "not recorded: reading the kernel's audit records needs a root supervisor (CAP_AUDIT_READ)",
        ),
        (
            NotRecorded::AuditDisabled,
            "not recorded: the kernel's audit subsystem is disabled on this host (audit_enabled 0); enable it (`auditctl -e 1`) to have landlock and seccomp denials reported",
        ),
        (
            NotRecorded::NotApplied {
                layer: "a seccomp filter",
            },
            "not recorded: a seccomp filter is not applied to this run",
        ),
        (
            NotRecorded::LandlockLogAbi { have: 3 },
            "not recorded: landlock logs denials from ABI 7 (kernel 6.15); this kernel has ABI 3",
        ),
        (
            NotRecorded::FilesNotAsked,
            "not recorded: off by default; `audit.file_refusals = true` records the paths a Tier C run could not open because the sandbox does not show them or shows them read-only (kernel audit rules for the run's session, which make every process of the host record its path calls while the run lasts)",
        ),
        (
            NotRecorded::Backend {
                why: "the container engine applies no landlock domain",
            },
            "not recorded: the container engine applies no landlock domain",
        ),
        (
            NotRecorded::NoSession,
            "not recorded: the kernel gave the run no audit session",
        ),
    ];
    for (why, text) in cases {
        assert_eq!(why.to_string(), text);
        assert_eq!(format!("not recorded: {}", why.reason()), text);
    }
}
