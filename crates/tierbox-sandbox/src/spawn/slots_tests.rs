#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn key(backend: &'static str, tmp_base: &Path) -> SlotKey {
    SlotKey {
        backend,
        tmp_base: tmp_base.to_path_buf(),
        uid: 1000,
        gid: 1000,
        read_only: Vec::new(),
        read_write: Vec::new(),
        scopes: false,
        tcp_connect_ports: None,
        landlock: false,
        memory_bytes: 1 << 30,
        max_processes: 64,
        cgroup: true,
    }
}

/// An idle slot goes only to a run of the backend it was made for: a bubblewrap run
/// (whose slot may not be recyclable) never takes, and then destroys, a native run's.
#[test]
fn idle_slots_are_taken_only_by_runs_of_the_same_backend() {
    let dir = tempfile::tempdir().unwrap();
    // A base of this test's own, so no other test's runs can match these keys.
    let base = dir.path().join("tmp");
    let native = key(crate::tier_c::NATIVE_BACKEND, &base);
    let via_bwrap = key(crate::bwrap::BACKEND_NAME, &base);
    assert_ne!(native, via_bwrap);
    pool()
        .lock()
        .unwrap()
        .push(Slot::new(native.clone(), base.join("slot"), None, None));
    assert!(take(&via_bwrap).is_none(), "a bwrap run took a native slot");
    let slot = take(&native).expect("the native run gets its slot back");
    assert!(slot.reused);
    assert_eq!(slot.tmp, base.join("slot"));
    assert!(take(&native).is_none(), "taken once");
}
