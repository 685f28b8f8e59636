#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use tierbox_policy::hosts::HostPattern;
use tierbox_policy::{EgressMode, Layer, Plan, TierCBackend};

use super::*;
use crate::test_fixtures::{GOLDEN_WORKSPACE, assert_golden, golden_plan};

fn opts() -> SbplOptions {
    SbplOptions {
        proxy_port: None,
        tmp_dir: Some(PathBuf::from("/private/var/folders/zz/T/tierbox-0123abcd")),
    }
}

#[test]
fn golden_profiles_for_the_shipped_policies() {
    for policy in ["strict", "build-with-caches"] {
        let plan = golden_plan(&format!("{policy}.toml"));
        let profile = sbpl_profile(&plan, &opts()).unwrap();
        assert_golden(&format!("sbpl-{policy}.sb"), &profile);
    }
}

/// Setting setuid or setgid is denied after every rule that allows writing (in SBPL the
/// last matching rule wins), for each shipped policy.
#[test]
fn setuid_and_setgid_bits_are_denied_after_every_write_grant() {
    for policy in ["strict", "build-with-caches"] {
        let profile = sbpl_profile(&golden_plan(&format!("{policy}.toml")), &opts()).unwrap();
        let deny = profile
            .find("(deny file-write-setugid)")
            .unwrap_or_else(|| panic!("{policy}: no file-write-setugid denial"));
        let last_allow = profile.rfind("(allow file-write").unwrap();
        assert!(
            deny > last_allow,
            "{policy}: the denial precedes a write grant"
        );
    }
}

#[test]
fn the_profile_denies_by_default_and_keeps_signals_in_the_sandbox() {
    let profile = sbpl_profile(&golden_plan("strict.toml"), &opts()).unwrap();
    assert!(profile.starts_with("(version 1)\n(deny default)\n"));
    assert!(profile.contains("(allow signal (target same-sandbox))"));
    assert!(profile.contains("(deny sysctl-write)"));
    assert!(!profile.contains("(allow sysctl-write"));
    assert!(
        !profile.contains("(allow mach-lookup)"),
        "unrestricted mach-lookup"
    );
    assert!(profile.contains("(deny mach-lookup (global-name-prefix \"com.docker.\"))"));
    assert!(profile.contains(r#"(regex #"^/private/var/run/docker\.sock$")"#));
    assert!(!profile.contains("(import"), "no imported base profile");
}

#[test]
fn writes_are_the_workspace_writable_paths_and_tmp_only() {
    let plan = golden_plan("build-with-caches.toml");
    let profile = sbpl_profile(&plan, &opts()).unwrap();
    let writes = profile
        .split("(allow file-write*")
        .nth(1)
        .unwrap()
        .split("))\n")
        .next()
        .unwrap();
    let mut granted: Vec<&str> = writes
        .lines()
        .filter_map(|l| l.trim().strip_prefix("(subpath \""))
        .map(|l| l.trim_end_matches([')', '"']))
        .collect();
    granted.sort_unstable();
    let mut expected: Vec<String> = plan
        .filesystem
        .writable
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    expected.push(GOLDEN_WORKSPACE.to_owned());
    expected.push("/private/var/folders/zz/T/tierbox-0123abcd".to_owned());
    expected.sort_unstable();
    assert_eq!(granted, expected);
    assert_eq!(profile.matches("(allow file-write*").count(), 1);
}

#[test]
fn protected_paths_are_denied_with_their_ancestors() {
    let profile = sbpl_profile(&golden_plan("strict.toml"), &opts()).unwrap();
    let denied: Vec<String> = tierbox_policy::validate::DEFAULT_PROTECTED
        .iter()
        .map(|e| format!("    (subpath \"{GOLDEN_WORKSPACE}/{e}\")"))
        .collect();
    assert!(
        profile.contains(&format!("(deny file-write*\n{})", denied.join("\n"))),
        "{profile}"
    );
    let unlink = profile.split("(deny file-write-unlink").nth(1).unwrap();
    let unlink = unlink.split("))\n").next().unwrap();
    for p in [
        GOLDEN_WORKSPACE.to_owned(),
        format!("{GOLDEN_WORKSPACE}/.git"),
    ] {
        assert!(
            unlink.contains(&format!("(literal \"{p}\"")),
            "{p}: {unlink}"
        );
    }
    // `.git` itself cannot be written (renamed, replaced) either: `subpath` includes it.
    assert!(profile.contains(&format!(
        "(deny file-write*\n    (subpath \"{GOLDEN_WORKSPACE}/.git\")"
    )));
    // Denials come after the allows (the later rule wins).
    let allow = profile.find("(allow file-write*").unwrap();
    let deny = profile.find("(deny file-write*\n    (subpath").unwrap();
    assert!(allow < deny);
}

#[test]
fn a_blocked_network_allows_nothing_and_the_proxy_only_loopback() {
    let mut plan = golden_plan("strict.toml");
    let profile = sbpl_profile(&plan, &opts()).unwrap();
    assert!(profile.contains("(deny network*)"));
    assert!(!profile.contains("(allow network"), "{profile}");
    plan.network.mode = EgressMode::Strict;
    plan.network.allow = vec![HostPattern::parse("crates.io").unwrap()];
    assert_eq!(sbpl_profile(&plan, &opts()), Err(SbplError::NoProxyPort));
    let with_port = SbplOptions {
        proxy_port: Some(3128),
        ..opts()
    };
    let profile = sbpl_profile(&plan, &with_port).unwrap();
    let allows: Vec<&str> = profile
        .lines()
        .filter(|l| l.starts_with("(allow network"))
        .collect();
    assert_eq!(
        allows,
        ["(allow network-outbound (remote tcp \"localhost:3128\"))"]
    );
    plan.network.mode = EgressMode::AllowAll;
    assert!(matches!(
        sbpl_profile(&plan, &with_port),
        Err(SbplError::HostNetwork { .. })
    ));
}

#[test]
fn paths_are_escaped_or_refused() {
    let mut plan: Plan = golden_plan("strict.toml");
    plan.filesystem.writable = vec![PathBuf::from("/data/we\"ird\\dir")];
    let profile = sbpl_profile(&plan, &opts()).unwrap();
    assert!(
        profile.contains(r#"(subpath "/data/we\"ird\\dir")"#),
        "{profile}"
    );
    for bad in ["/data/new\nline", "/data/nul\0", "/data/tab\there"] {
        plan.filesystem.writable = vec![PathBuf::from(bad)];
        assert!(
            matches!(
                sbpl_profile(&plan, &opts()),
                Err(SbplError::UnsupportedPath { .. })
            ),
            "{bad:?}"
        );
    }
    // An injected closing quote never ends the literal.
    let s = sbpl_string(std::path::Path::new("/x\") (allow default) (\"")).unwrap();
    assert_eq!(s, r#""/x\") (allow default) (\"""#);
}

#[test]
fn layers_follow_the_optional_layers_model() {
    let mut plan = golden_plan("strict.toml");
    assert_eq!(check_layers(&plan).unwrap(), [Layer::Cgroup, Layer::Disk]);
    plan.tier.optional_layers.retain(|l| *l != Layer::Cgroup);
    let err = check_layers(&plan).unwrap_err();
    assert_eq!(err.code(), "tier.unavailable");
    let mut no_disk = golden_plan("strict.toml");
    no_disk.tier.optional_layers.retain(|l| *l != Layer::Disk);
    let err = check_layers(&no_disk).unwrap_err();
    assert!(err.to_string().contains("disk cannot be enforced"), "{err}");
    let mut plan = golden_plan("strict.toml");
    plan.tier.backend = TierCBackend::Bwrap;
    assert_eq!(check_layers(&plan).unwrap_err().code(), "tier.unavailable");
}

#[test]
fn sandbox_exec_is_absolute_and_argv_is_kept() {
    let plan = golden_plan("strict.toml");
    let argv = sandbox_exec_argv(&plan, "(version 1)");
    assert_eq!(argv[0], "/usr/bin/sandbox-exec");
    assert_eq!(argv[1], "-p");
    assert_eq!(argv[3], "--");
    assert_eq!(argv[4], "/usr/bin/ls");
    assert_eq!(argv[5], "-la");
    let names: Vec<&str> = rlimits(&plan).iter().map(|r| r.0).collect();
    assert_eq!(
        names,
        ["RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE"]
    );
}
