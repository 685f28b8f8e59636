//! The container backends' seccomp profile: the engine's own default profile with
//! Tierbox's rules on what a run may leave behind added to it
//! ([`crate::linux::seccomp::LEAVE_BEHIND`]).
//!
//! The engines' default profile (Moby's, shared by Podman's `containers-common`) allows
//! `chmod`, the `open` family and `mknod` whatever their arguments, so a container's user
//! can leave a setuid file in the workspace — owned, on the host, by the uid the container
//! runs as. [`extend_profile`] keeps every rule of the default and only narrows it: each
//! [`LEAVE_BEHIND`] call the default allows unconditionally is allowed only without a
//! setuid/setgid mode or a device type, and refused (`EPERM`) with one; `openat2`, whose
//! mode no filter can read, becomes `ENOSYS` (libc falls back to `openat`). A call the
//! default does not allow stays as it was.
//!
//! The engines read the profile as a file (`--security-opt seccomp=PATH`); the default
//! is taken from the first of [`BASE_PROFILES`] that exists, and the extended profile is
//! handed to the engine CLI on an inherited fd, never written to disk. Docker's built-in
//! default is not on disk: a Docker host needs `containers-common`'s copy (the same
//! profile), and without one the run is refused rather than run without the rules.
//!
//! [`LEAVE_BEHIND`]: crate::linux::seccomp::LEAVE_BEHIND

use serde_json::{Value, json};

use crate::linux::seccomp::{LEAVE_BEHIND, LeaveBehind, OPEN_CREATE_FLAGS, RENAME_WHITEOUT};

/// Where the engines' default seccomp profile is read from, in order: the
/// administrator's override, then `containers-common`'s (the profile Podman loads itself).
pub const BASE_PROFILES: &[&str] = &[
    "/etc/containers/seccomp.json",
    "/usr/share/containers/seccomp.json",
];

/// Most bytes read of a base profile (the shipped one is ~20 KB): a larger file is
/// refused, not parsed.
pub const MAX_BASE_PROFILE_BYTES: u64 = 1 << 20;

/// Why no profile could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// None of [`BASE_PROFILES`] exists.
    #[error(
        "no default seccomp profile to add Tierbox's rules to: none of {} exists (install containers-common, which ships it)",
        BASE_PROFILES.join(", ")
    )]
    NoBase,
    /// The base profile could not be read or is not a profile this module understands.
    #[error("the seccomp profile {path}: {reason}")]
    Base {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The extended profile for this host: [`extend_profile`] of the first of
/// [`BASE_PROFILES`] that exists.
pub fn host_profile() -> Result<String, ProfileError> {
    for path in BASE_PROFILES {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(ProfileError::Base {
                    path: (*path).to_owned(),
                    reason: e.to_string(),
                });
            }
        };
        let base_error = |reason: String| ProfileError::Base {
            path: (*path).to_owned(),
            reason,
        };
        if meta.len() > MAX_BASE_PROFILE_BYTES {
            return Err(base_error(format!(
                "{} bytes, more than {MAX_BASE_PROFILE_BYTES}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| base_error(e.to_string()))?;
        return extend_profile(&text).map_err(base_error);
    }
    Err(ProfileError::NoBase)
}

/// `base` (an OCI/Moby seccomp profile, JSON) narrowed by Tierbox's rules (see the
/// module docs). Pure. An error names what in `base` is not understood: a profile whose
/// default action allows, or a rule for one of the calls that carries conditions of its
/// own, is refused rather than guessed at.
///
/// ```
/// # #[cfg(target_arch = "x86_64")] {
/// use tierbox_sandbox::container::seccomp::extend_profile;
///
/// let base = r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
///     {"names": ["read", "fchmodat", "openat2"], "action": "SCMP_ACT_ALLOW"}]}"#;
/// let extended: serde_json::Value = serde_json::from_str(&extend_profile(base).unwrap()).unwrap();
/// let text = extended.to_string();
/// assert!(text.contains("\"read\""));
/// assert!(text.contains("SCMP_CMP_MASKED_EQ"));
/// # }
/// ```
pub fn extend_profile(base: &str) -> Result<String, String> {
    let mut profile: Value = serde_json::from_str(base).map_err(|e| format!("not JSON: {e}"))?;
    let default = profile
        .get("defaultAction")
        .and_then(Value::as_str)
        .ok_or("no defaultAction")?;
    if default == "SCMP_ACT_ALLOW" || default == "SCMP_ACT_LOG" {
        return Err(format!(
            "its default action {default} allows every call the rules do not name"
        ));
    }
    let rules = profile
        .get_mut("syscalls")
        .and_then(Value::as_array_mut)
        .ok_or("no syscalls list")?;
    let narrowed: Vec<&str> = LEAVE_BEHIND
        .iter()
        .map(|&(name, ..)| name)
        .chain(["openat2"])
        .collect();
    let mut allowed: Vec<&str> = Vec::new();
    for rule in rules.iter_mut() {
        let action = rule
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let conditional = rule
            .get("args")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
            || rule
                .get("includes")
                .and_then(Value::as_object)
                .is_some_and(|o| !o.is_empty())
            || rule
                .get("excludes")
                .and_then(Value::as_object)
                .is_some_and(|o| !o.is_empty());
        let Some(names) = rule.get_mut("names").and_then(Value::as_array_mut) else {
            continue;
        };
        let named: Vec<&str> = narrowed
            .iter()
            .copied()
            .filter(|n| names.iter().any(|v| v.as_str() == Some(n)))
            .collect();
        if named.is_empty() {
            continue;
        }
        if action != "SCMP_ACT_ALLOW" || conditional {
            return Err(format!(
                "a {action} rule with conditions names {}; only unconditional allows of these calls can be narrowed",
                named.join(", ")
            ));
        }
        names.retain(|v| !v.as_str().is_some_and(|n| named.contains(&n)));
        allowed.extend(named);
    }
    rules.retain(|r| {
        r.get("names")
            .and_then(Value::as_array)
            .is_none_or(|n| !n.is_empty())
    });
    for &(name, _, rule) in LEAVE_BEHIND {
        if allowed.contains(&name) {
            rules.extend(narrowing_rules(name, rule));
        }
    }
    if allowed.contains(&"openat2") {
        rules.push(json!({
            "names": ["openat2"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": libc::ENOSYS,
            "comment": "tierbox: its mode sits in a struct no filter can read; libc falls back to openat"
        }));
    }
    serde_json::to_string(&profile).map_err(|e| e.to_string())
}

/// `arg & mask == value`, libseccomp's masked comparison.
fn masked(index: u32, mask: u32, value: u32) -> Value {
    json!({"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"})
}

/// The rules that replace an unconditional allow of `name`: allowed when no refused bit
/// is set, `EPERM` when one is (each refused bit a rule of its own: libseccomp ORs the
/// rules of a call and ANDs the comparisons of a rule).
fn narrowing_rules(name: &str, rule: LeaveBehind) -> Vec<Value> {
    const SETUID: u32 = libc::S_ISUID;
    const SETGID: u32 = libc::S_ISGID;
    let comment = "tierbox: nothing a run leaves behind may be setuid, setgid or a device node";
    let allow = |args: Vec<Value>| json!({"names": [name], "action": "SCMP_ACT_ALLOW", "args": args, "comment": comment});
    let refuse = |args: Vec<Value>| json!({"names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM, "args": args, "comment": comment});
    let mut out = Vec::new();
    match rule {
        LeaveBehind::Mode(i) => {
            out.push(allow(vec![masked(i, SETUID | SETGID, 0)]));
            for bit in [SETUID, SETGID] {
                out.push(refuse(vec![masked(i, bit, bit)]));
            }
        }
        LeaveBehind::CreateMode { flags, mode } => {
            out.push(allow(vec![masked(flags, OPEN_CREATE_FLAGS, 0)]));
            out.push(allow(vec![masked(mode, SETUID | SETGID, 0)]));
            for flag in [
                libc::O_CREAT as u32,
                OPEN_CREATE_FLAGS & !(libc::O_CREAT as u32),
            ] {
                for bit in [SETUID, SETGID] {
                    out.push(refuse(vec![
                        masked(flags, flag, flag),
                        masked(mode, bit, bit),
                    ]));
                }
            }
        }
        LeaveBehind::Node(i) => {
            let device = libc::S_IFCHR;
            out.push(allow(vec![masked(i, SETUID | SETGID | device, 0)]));
            for bit in [SETUID, SETGID, device] {
                out.push(refuse(vec![masked(i, bit, bit)]));
            }
        }
        LeaveBehind::RenameFlags(i) => {
            out.push(allow(vec![masked(i, RENAME_WHITEOUT, 0)]));
            out.push(refuse(vec![masked(i, RENAME_WHITEOUT, RENAME_WHITEOUT)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A stand-in for the engines' default, shaped as theirs: default `ERRNO`, one big
    /// allow list, and conditional rules for other calls.
    const BASE: &str = r#"{
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 38,
        "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
        "syscalls": [
            {"names": ["read", "write", "chmod", "fchmod", "fchmodat", "open", "openat", "openat2",
                       "creat", "mknod", "mknodat", "renameat2"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]}
        ]
    }"#;

    /// What the extended profile decides for `name` with `args`, evaluated as libseccomp
    /// does: the matching rules' actions (all rules of a call ORed, the comparisons of a
    /// rule ANDed), else the default.
    fn decide(profile: &Value, name: &str, args: &[u64; 6]) -> Vec<String> {
        let mut hits = Vec::new();
        for rule in profile["syscalls"].as_array().unwrap() {
            if !rule["names"].as_array().unwrap().iter().any(|n| n == name) {
                continue;
            }
            let all = rule
                .get("args")
                .and_then(Value::as_array)
                .is_none_or(|conds| {
                    conds.iter().all(|c| {
                        let (i, v) = (c["index"].as_u64().unwrap(), c["value"].as_u64().unwrap());
                        let arg = args[i as usize];
                        match c["op"].as_str().unwrap() {
                            "SCMP_CMP_MASKED_EQ" => arg & v == c["valueTwo"].as_u64().unwrap(),
                            "SCMP_CMP_EQ" => arg == v,
                            op => panic!("{op}"),
                        }
                    })
                });
            if all {
                let action = rule["action"].as_str().unwrap().to_owned();
                hits.push(match rule.get("errnoRet") {
                    Some(e) => format!("{action}({e})"),
                    None => action,
                });
            }
        }
        hits.sort();
        hits.dedup();
        hits
    }

    #[test]
    fn the_default_is_narrowed_for_what_a_run_leaves_behind_and_kept_otherwise() {
        let p: Value = serde_json::from_str(&extend_profile(BASE).unwrap()).unwrap();
        let eperm = format!("SCMP_ACT_ERRNO({})", libc::EPERM);
        let allow = "SCMP_ACT_ALLOW".to_owned();
        let at = |i: usize, v: u64| {
            let mut a = [0u64; 6];
            a[i] = v;
            a
        };
        let open = |flags: u64, mode: u64| {
            let mut a = [0u64; 6];
            a[2] = flags;
            a[3] = mode;
            a
        };
        let creat = u64::from(libc::O_CREAT as u32 | libc::O_WRONLY as u32);
        let tmpfile = (libc::O_TMPFILE | libc::O_WRONLY) as u64;
        let chr = u64::from(libc::S_IFCHR) | 0o644;
        for (name, args, want) in [
            ("read", [0; 6], vec![allow.clone()]),
            ("fchmodat", at(2, 0o755), vec![allow.clone()]),
            ("fchmodat", at(2, 0o4755), vec![eperm.clone()]),
            ("fchmodat", at(2, 0o2775), vec![eperm.clone()]),
            ("chmod", at(1, 0o6755), vec![eperm.clone()]),
            ("openat", open(creat, 0o644), vec![allow.clone()]),
            (
                "openat",
                open(libc::O_RDONLY as u64, 0o4755),
                vec![allow.clone()],
            ),
            ("openat", open(creat, 0o4755), vec![eperm.clone()]),
            ("openat", open(tmpfile, 0o2755), vec![eperm.clone()]),
            (
                "mknodat",
                at(2, u64::from(libc::S_IFIFO) | 0o644),
                vec![allow.clone()],
            ),
            ("mknodat", at(2, chr), vec![eperm.clone()]),
            (
                "mknodat",
                at(2, u64::from(libc::S_IFREG) | 0o4755),
                vec![eperm.clone()],
            ),
            ("renameat2", at(4, 0), vec![allow.clone()]),
            (
                "renameat2",
                at(4, u64::from(RENAME_WHITEOUT)),
                vec![eperm.clone()],
            ),
            (
                "openat2",
                [0; 6],
                vec![format!("SCMP_ACT_ERRNO({})", libc::ENOSYS)],
            ),
            ("personality", [0; 6], vec![allow.clone()]),
        ] {
            assert_eq!(decide(&p, name, &args), want, "{name} {args:?}");
        }
        // Everything else of the base is as it was.
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(p["defaultErrnoRet"], 38);
        assert_eq!(p["archMap"][0]["architecture"], "SCMP_ARCH_X86_64");
    }

    #[test]
    fn a_base_that_cannot_be_narrowed_safely_is_refused() {
        for (base, why) in [
            ("not json", "not JSON"),
            (r#"{"syscalls": []}"#, "defaultAction"),
            (
                r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}"#,
                "allows every call",
            ),
            (
                r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["openat"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 2, "value": 1, "op": "SCMP_CMP_EQ"}]}]}"#,
                "conditions",
            ),
            (
                r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["chmod"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_FOWNER"]}}]}"#,
                "conditions",
            ),
        ] {
            let e = extend_profile(base).unwrap_err();
            assert!(e.contains(why), "{base}: {e}");
        }
    }

    /// A call the default denies stays denied: nothing is added for it.
    #[test]
    fn calls_the_default_denies_are_not_added() {
        let base = r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}"#;
        let p: Value = serde_json::from_str(&extend_profile(base).unwrap()).unwrap();
        assert_eq!(p["syscalls"].as_array().unwrap().len(), 1);
    }

    /// The profile containers-common ships, where the host has it, is understood.
    #[test]
    fn the_hosts_default_profile_is_extended() {
        match host_profile() {
            Ok(text) => assert!(text.contains("SCMP_CMP_MASKED_EQ")),
            Err(ProfileError::NoBase) => {
                tierbox_test_support::skip(
                    "the_hosts_default_profile_is_extended",
                    "no containers-common seccomp profile on this host",
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
}
