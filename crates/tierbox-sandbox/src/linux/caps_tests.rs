//! Capability tests: parsing, and the full drop sequence in a forked child.

use super::*;
use crate::linux::sys::{self, test_support as ts};

#[test]
fn parses_cap_last_cap() {
    assert_eq!(parse_last_cap("40\n"), Some(40));
    assert_eq!(parse_last_cap(" 63 "), Some(63));
    assert_eq!(parse_last_cap("64"), None);
    assert_eq!(parse_last_cap("x"), None);
    assert_eq!(parse_last_cap(""), None);
}

#[test]
fn last_cap_matches_the_kernel() {
    let from_proc = std::fs::read_to_string(CAP_LAST_CAP_PATH)
        .ok()
        .and_then(|s| parse_last_cap(&s))
        .unwrap_or(DEFAULT_LAST_CAP);
    assert_eq!(last_cap(), from_proc);
    assert_eq!(last_cap(), last_cap(), "cached");
}

#[test]
fn parses_status_fields() {
    let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd:\t0000000000000400\n";
    assert_eq!(
        sys::parse_status_hex_field(status, "CapEff"),
        Some(0x1ff_ffff_ffff)
    );
    assert_eq!(sys::parse_status_hex_field(status, "CapBnd"), Some(0x400));
    assert_eq!(sys::parse_status_hex_field(status, "CapAmb"), None);
    assert!(read_cap_eff_from_status().is_some());
}

fn is_root() -> bool {
    ts::getresuid().1 == 0
}

/// The documented order, in a forked child, as root: afterwards no capability in any set,
/// securebits locked, ids changed.
#[test]
fn full_drop_sequence_in_a_forked_child() {
    if !is_root() {
        tierbox_test_support::skip_here("needs root (CAP_SETPCAP, CAP_SETUID)");
        return;
    }
    let last = last_cap();
    let (r, w) = ts::pipe();
    let (r2, w2) = ts::pipe();
    let pid = ts::fork_child(|| {
        ts::close(r);
        ts::close(w2);
        let step = || -> Result<(), i32> {
            sys::set_securebits_noroot().map_err(|_| 10)?;
            sys::drop_bounding_set(last).map_err(|_| 11)?;
            sys::clear_ambient().map_err(|_| 12)?;
            sys::set_ids(65534, 65534).map_err(|_| 13)?;
            sys::capset_zero().map_err(|_| 14)?;
            Ok(())
        };
        if let Err(code) = step() {
            return code;
        }
        match ts::capget_self() {
            Ok((0, 0)) => {}
            _ => return 20,
        }
        if ts::capbset_read(0) != Ok(0) || ts::capbset_read(last) != Ok(0) {
            return 21;
        }
        if ts::getresuid() != (65534, 65534, 65534) {
            return 22;
        }
        if ts::get_securebits() != Ok(i64::from(sys::SECUREBITS_LOCKED_DOWN)) {
            return 23;
        }
        // Locked: cannot be undone (nothing is left to undo it with), and asking for the
        // same bits again only reads them.
        if ts::set_securebits(0) != Err(libc::EPERM) || sys::set_securebits_noroot().is_err() {
            return 24;
        }
        // Dropping again without CAP_SETPCAP succeeds: nothing is left in the set.
        if sys::drop_bounding_set(last).is_err() {
            return 25;
        }
        // Tell the parent we are done, then wait for it to read our status.
        if sys::write_all_raw(w, b"k").is_err() {
            return 26;
        }
        let mut b = [0u8; 1];
        let _ = ts::read(r2, &mut b);
        0
    });
    ts::close(w);
    ts::close(r2);
    let mut b = [0u8; 1];
    let n = ts::read(r, &mut b).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    ts::close(w2);
    ts::close(r);
    let code = ts::wait_exit(pid);
    assert_eq!(code, 0, "child failed at step {code}");
    assert_eq!(n, 1);
    for field in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert_eq!(
            sys::parse_status_hex_field(&status, field),
            Some(0),
            "{field} in\n{status}"
        );
    }
}

/// Unprivileged, the privileged steps fail with EPERM (so the caller can decide) and the
/// unprivileged ones still succeed.
#[test]
fn unprivileged_child_gets_eperm_from_privileged_steps() {
    if !is_root() {
        tierbox_test_support::skip_here("needs root to become unprivileged first");
        return;
    }
    let last = last_cap();
    let code = ts::fork_with(|| {
        // Become an ordinary user with no capabilities (glibc-free, as the launcher does).
        if sys::set_ids(65534, 65534).is_err() || sys::capset_zero().is_err() {
            return 10;
        }
        if sys::set_securebits_noroot() != Err(libc::EPERM) {
            return 11;
        }
        // The bounding set is still full and we lack CAP_SETPCAP.
        if sys::drop_bounding_set(last) != Err(libc::EPERM) {
            return 12;
        }
        if sys::clear_ambient().is_err() || sys::capset_zero().is_err() {
            return 13;
        }
        0
    });
    assert_eq!(code, 0, "child failed at step {code}");
}

/// The child skips `PR_CAP_AMBIENT_CLEAR_ALL` because `capset_zero` empties the ambient
/// set with the permitted and inheritable ones: a supervisor started with an ambient
/// capability must not pass it on. Run as in the child: securebits, bounding set, capset.
#[test]
fn capset_zero_also_empties_an_ambient_set() {
    if !is_root() {
        tierbox_test_support::skip_here("needs root (CAP_SETPCAP, CAP_NET_BIND_SERVICE)");
        return;
    }
    let last = last_cap();
    let cap: u32 = 10; // CAP_NET_BIND_SERVICE
    let code = ts::fork_with(|| {
        let Ok((eff, prm)) = ts::capget_self() else {
            return 10;
        };
        // Inheritable + ambient: what a supervisor started with `setpriv --ambient-caps`
        // (or systemd `AmbientCapabilities=`) would carry.
        if ts::capset_masks(eff, prm, 1 << cap).is_err() {
            return 11;
        }
        if ts::ambient(libc::PR_CAP_AMBIENT_RAISE, cap).is_err()
            || ts::ambient(libc::PR_CAP_AMBIENT_IS_SET, cap) != Ok(1)
        {
            return 12;
        }
        if sys::set_securebits_noroot().is_err() || sys::drop_bounding_set(last).is_err() {
            return 13;
        }
        // Still there after the bounding set is gone: only capset takes it away.
        if ts::ambient(libc::PR_CAP_AMBIENT_IS_SET, cap) != Ok(1) {
            return 14;
        }
        if sys::capset_zero().is_err() {
            return 15;
        }
        match ts::ambient(libc::PR_CAP_AMBIENT_IS_SET, cap) {
            Ok(0) => 0,
            _ => 16,
        }
    });
    assert_eq!(code, 0, "step {code} failed");
}
