//! Unit tests of the policy document: parsing, defaults and the checks.

use super::*;

#[test]
fn the_caps_on_kept_change_sets_are_bounded_and_per_owner_is_at_most_the_total() {
    let base = "version = 1\n[workspace]\n";
    for (doc, field) in [
        (
            "keep_changes_total_bytes = 1024\n",
            "keep_changes_total_bytes",
        ),
        (
            "keep_changes_total_bytes = 2199023255553\n",
            "keep_changes_total_bytes",
        ),
        (
            "keep_changes_per_owner_entries = 15\n",
            "keep_changes_per_owner_entries",
        ),
        (
            "keep_changes_total_entries = 10000001\n",
            "keep_changes_total_entries",
        ),
        (
            "keep_changes_total_bytes = 2097152\nkeep_changes_per_owner_bytes = 4194304\n",
            "keep_changes_per_owner_bytes",
        ),
        (
            "keep_changes_total_entries = 100\n",
            "keep_changes_per_owner_entries",
        ),
    ] {
        let err = Policy::from_toml(&format!("{base}{doc}")).unwrap_err();
        assert!(
            matches!(&err, PolicyError::Invalid { field: f, .. } if f.ends_with(field)),
            "{doc}: {err}"
        );
    }
    let p = Policy::from_toml(&format!(
        "{base}keep_changes_total_entries = 100\nkeep_changes_per_owner_entries = 100\n"
    ))
    .unwrap();
    assert_eq!(p.workspace.keep_caps().per_owner_entries, 100);
    assert_eq!(Policy::default().workspace.keep_caps(), KeepCaps::default());
    assert_eq!(
        KeepCaps::default().total_bytes,
        DEFAULT_KEEP_CHANGES_TOTAL_BYTES
    );
}

#[test]
fn spill_lifetime_and_cap_are_bounded_and_have_documented_defaults() {
    let base = "version = 1\n[output]\nspill = true\n";
    for (doc, field) in [
        ("spill_keep_secs = 0\n", "output.spill_keep_secs"),
        (
            &format!("spill_keep_secs = {}\n", MAX_SPILL_KEEP_SECS + 1) as &str,
            "output.spill_keep_secs",
        ),
        ("spill_total_bytes = 0\n", "output.spill_total_bytes"),
    ] {
        let err = Policy::from_toml(&format!("{base}{doc}")).unwrap_err();
        assert!(
            matches!(&err, PolicyError::Invalid { field: f, .. } if f == field),
            "{doc}: {err}"
        );
    }
    let p = Policy::from_toml(&format!(
        "{base}spill_keep_secs = 60\nspill_total_bytes = 1048576\n"
    ))
    .unwrap();
    assert_eq!(
        (p.output.spill_keep_secs, p.output.spill_total_bytes),
        (60, 1 << 20)
    );
    let d = Policy::default().output;
    assert_eq!(
        (d.spill_keep_secs, d.spill_total_bytes),
        (DEFAULT_SPILL_KEEP_SECS, DEFAULT_SPILL_TOTAL_BYTES)
    );
}

#[test]
fn background_lifetime_and_spill_have_hard_ceilings() {
    let base = "version = 1\n[background]\n";
    for (field, value) in [
        ("max_lifetime_ms", MAX_BACKGROUND_LIFETIME_MS + 1),
        ("spill_bytes", MAX_BACKGROUND_SPILL_BYTES + 1),
    ] {
        let err = Policy::from_toml(&format!("{base}{field} = {value}\n")).unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
    }
    let p = Policy::from_toml(&format!("{base}spill_bytes = 1048576\n")).unwrap();
    assert_eq!(p.background.spill_bytes, 1 << 20);
}

#[test]
fn builtin_default_parses_and_is_strict() {
    let p = Policy::from_toml(BUILTIN_DEFAULT_POLICY_TOML).expect("strict.toml parses");
    assert_eq!(p.tier.minimum, Tier::B);
    assert_eq!(p.egress.mode, EgressMode::BlockAll);
    assert!(!p.exec.allow_interpreters);
    assert!(!p.exec.danger_allow_any_executable);
    assert!(p.redaction.enabled);
    // What a process actually starts from is the JSON form made at build time.
    assert_eq!(
        Policy::from_json(BUILTIN_DEFAULT_POLICY_JSON),
        Ok(p.clone())
    );
    assert_eq!(Policy::builtin_default(), p);
}

#[test]
fn unknown_keys_are_rejected_at_every_level() {
    for doc in [
        "version = 1\nbogus = 1\n",
        "version = 1\n[exec]\nallow_interpreter = true\n",
        "version = 1\n[limits]\nmemory = 5\n",
        "version = 1\n[egress]\nmodes = \"strict\"\n",
    ] {
        assert!(
            matches!(Policy::from_toml(doc), Err(PolicyError::Parse { .. })),
            "{doc}"
        );
    }
}

#[test]
fn star_requires_the_danger_flag() {
    let doc = "version = 1\n[exec]\nallowed_executables = [\"*\"]\n";
    assert!(matches!(
        Policy::from_toml(doc),
        Err(PolicyError::Invalid { .. })
    ));
    let doc =
        "version = 1\n[exec]\nallowed_executables = [\"*\"]\ndanger_allow_any_executable = true\n";
    assert!(Policy::from_toml(doc).is_ok());
}

#[test]
fn audit_paths_must_be_absolute() {
    let doc = "version = 1\n[audit]\nlog = \"/var/log/tierbox.jsonl\"\n";
    assert!(Policy::from_toml(doc).is_ok());
    let doc = "version = 1\n[audit]\nlog = \"audit.jsonl\"\n";
    assert!(
        matches!(Policy::from_toml(doc), Err(PolicyError::Invalid { field, .. }) if field == "audit.log")
    );
    let doc = "version = 1\n[audit]\nsigning_key = \"key.pem\"\n";
    assert!(
        matches!(Policy::from_toml(doc), Err(PolicyError::Invalid { field, .. }) if field == "audit.signing_key")
    );
    assert!(Policy::from_toml("version = 1\n[audit]\n").is_ok());
}

#[test]
fn wrong_version_is_rejected() {
    assert!(matches!(
        Policy::from_toml("version = 2\n"),
        Err(PolicyError::Version { found: 2 })
    ));
}

#[test]
fn defaults_are_locked_down() {
    let p = Policy::default();
    assert!(p.exec.allowed_executables.is_empty());
    assert_eq!(p.egress.mode, EgressMode::BlockAll);
    assert_eq!(p.limits.timeout_ms, 60_000);
    assert_eq!(p.output.max_bytes, 1 << 20);
}

#[test]
fn container_backends_need_an_image_and_a_non_root_user() {
    let doc = |backend: &str, container: &str| {
        format!("version = 1\n[tier]\nbackend = \"{backend}\"\n[tier.container]\n{container}")
    };
    for backend in ["docker", "podman"] {
        let err = Policy::from_toml(&doc(backend, "")).unwrap_err();
        assert!(
            matches!(&err, PolicyError::Invalid { field, reason } if field == "tier.container.image" && reason.contains(backend)),
            "{err}"
        );
        let p = Policy::from_toml(&doc(backend, "image = \"localhost/tools:1\"\n")).unwrap();
        assert_eq!(p.tier.container.effective_user(), DEFAULT_CONTAINER_USER);
    }
    for bad_user in ["root", "0", "0:0", "-u", "a b", "1:2:3"] {
        let text = doc("docker", &format!("image = \"x\"\nuser = \"{bad_user}\"\n"));
        assert!(
            matches!(Policy::from_toml(&text), Err(PolicyError::Invalid { field, .. }) if field == "tier.container.user"),
            "{bad_user}"
        );
    }
    for bad_image in ["", "--privileged", "a b", "x\ny"] {
        let text = doc("podman", &format!("image = {bad_image:?}\n"));
        assert!(
            matches!(Policy::from_toml(&text), Err(PolicyError::Invalid { field, .. }) if field == "tier.container.image"),
            "{bad_image:?}"
        );
    }
    assert!(Policy::from_toml(&doc("docker", "image = \"x\"\nuser = \"1000:1000\"\n")).is_ok());
    assert!(Policy::from_toml(&doc("docker", "image = \"x\"\nprivileged = true\n")).is_err());
    assert!(Policy::from_toml("version = 1\n[limits]\ncpus = 0\n").is_err());
    // Native and bwrap need no image.
    assert!(Policy::from_toml("version = 1\n[tier]\nbackend = \"bwrap\"\n").is_ok());
}

/// A JSON policy is the same document as its TOML form, checked by the same rules:
/// unknown keys, out-of-range values and oversized documents are refused alike.
#[test]
fn json_policies_are_parsed_and_checked_like_toml() {
    let toml = "version = 1\n[exec]\nallowed_executables = [\"git\"]\n\
                [limits]\ncpus = 2\nmemory_bytes = 268435456\n\
                [egress]\nmode = \"strict\"\nallow = [\"*.crates.io:443\"]\n";
    let json = r#"{"version": 1, "exec": {"allowed_executables": ["git"]},
        "limits": {"cpus": 2, "memory_bytes": 268435456},
        "egress": {"mode": "strict", "allow": ["*.crates.io:443"]}}"#;
    let from_json = Policy::from_json(json).unwrap();
    assert_eq!(from_json, Policy::from_toml(toml).unwrap());
    assert_eq!(from_json.limits.cpus, Some(2));

    assert!(matches!(
        Policy::from_json(r#"{"version": 1, "bogus": 1}"#),
        Err(PolicyError::Parse { .. })
    ));
    assert!(matches!(
        Policy::from_json(r#"{"version": 1, "limits": {"cpus": 0}}"#),
        Err(PolicyError::Invalid { field, .. }) if field == "limits.cpus"
    ));
    assert!(matches!(
        Policy::from_json(r#"{"version": 2}"#),
        Err(PolicyError::Version { found: 2 })
    ));
    let padded = format!("{{\"version\": 1{}}}", " ".repeat(MAX_POLICY_BYTES));
    assert!(matches!(
        Policy::from_json(&padded),
        Err(PolicyError::TooLarge { .. })
    ));
}

#[test]
fn tiers_order_by_strength() {
    assert!(Tier::B < Tier::C && Tier::C < Tier::A);
}

#[test]
fn a_workspace_home_stays_inside_the_workspace_and_outside_git() {
    let with = |home: &str| {
        let mut p = Policy::default();
        p.env.workspace_home = Some(home.to_owned());
        p.check()
    };
    assert!(with(".agent/home").is_ok());
    for bad in [
        "/abs",
        "../up",
        "a/../b",
        "",
        "a//b",
        "./a",
        ".git",
        "sub/.git/x",
        "a/",
    ] {
        let err = with(bad).unwrap_err();
        assert!(
            err.to_string().contains("env.workspace_home"),
            "{bad:?}: {err}"
        );
    }
    assert!(with(&"a".repeat(MAX_WORKSPACE_HOME_BYTES + 1)).is_err());
}

/// Terminated hosts' rules and credentials load when every part is well formed, the mode
/// is strict and the host is allowed; each mistake is refused naming its field.
#[test]
fn egress_rules_and_credentials_are_checked_when_the_policy_loads() {
    let good = r#"version = 1
[egress]
mode = "strict"
allow = ["api.github.com:443"]
upstream_roots = ["/etc/tierbox/test-ca.pem"]
[egress.hosts."api.github.com"]
allow = ["GET /repos/*", "POST /graphql"]
[[egress.credentials]]
name = "github"
host = "api.github.com"
header = "Authorization"
env = "GITHUB_TOKEN"
secret = { env = "GITHUB_TOKEN" }
"#;
    let p = Policy::from_toml(good).unwrap();
    let terminated = crate::plan::NetworkPlan::terminated_from(&p.egress);
    assert_eq!(terminated["api.github.com"].allow.len(), 2);
    assert_eq!(terminated["api.github.com"].credentials[0].name, "github");
    for (from, to, field) in [
        ("mode = \"strict\"", "mode = \"allow_all\"", "egress.hosts"),
        (
            "allow = [\"api.github.com:443\"]",
            "allow = [\"x.example\"]",
            "egress.hosts",
        ),
        ("\"GET /repos/*\"", "\"GET repos\"", "allow"),
        (
            "[egress.hosts.\"api.github.com\"]",
            "[egress.hosts.\"API.github.com\"]",
            "egress.hosts",
        ),
        (
            "header = \"Authorization\"",
            "header = \"Bad Header\"",
            "egress.credentials[0]",
        ),
        (
            "header = \"Authorization\"",
            "query = \"t\"\nheader = \"Authorization\"",
            "egress.credentials[0]",
        ),
        (
            "env = \"GITHUB_TOKEN\"\nsecret",
            "env = \"github-token\"\nsecret",
            "egress.credentials[0]",
        ),
        (
            "{ env = \"GITHUB_TOKEN\" }",
            "{ file = \"relative\" }",
            "egress.credentials[0]",
        ),
        ("{ env = \"GITHUB_TOKEN\" }", "{ }", "egress.credentials[0]"),
        (
            "name = \"github\"",
            "name = \"git hub\"",
            "egress.credentials[0]",
        ),
        (
            "host = \"api.github.com\"",
            "host = \"other.example\"",
            "egress.credentials[0].host",
        ),
        (
            "\"/etc/tierbox/test-ca.pem\"",
            "\"test-ca.pem\"",
            "egress.upstream_roots",
        ),
    ] {
        assert!(good.contains(from), "{from}");
        let doc = good.replacen(from, to, 1);
        let err = Policy::from_toml(&doc).unwrap_err();
        assert!(
            matches!(&err, PolicyError::Invalid { field: f, .. } if f.ends_with(field)),
            "{to}: {err}"
        );
    }
    // The variables the runner owns in such a run: the placeholder's, the bundle's, and
    // the secret's own never copied in.
    let own_secret = good.replacen("{ env = \"GITHUB_TOKEN\" }", "{ env = \"GH_SECRET\" }", 1);
    for (doc, field, says) in [
        (good, "[env]\npass = [\"GITHUB_TOKEN\"]", "placeholder"),
        (good, "[env.set]\nGITHUB_TOKEN = \"x\"", "placeholder"),
        (
            &own_secret,
            "[env]\npass = [\"GH_SECRET\"]",
            "copy the secret",
        ),
        (good, "[env.set]\nSSL_CERT_FILE = \"/x\"", "trust bundle"),
    ] {
        let doc = format!("{doc}{field}\n");
        let err = Policy::from_toml(&doc).unwrap_err().to_string();
        assert!(err.contains(says), "{field}: {err}");
    }
    assert!(Policy::from_toml(&format!("{own_secret}[env]\npass = [\"HOME\"]\n")).is_ok());
    // A request cannot bring a secret: there is no request field for one.
    let req = serde_json::json!({"command": "true", "credentials": [{"env": "X"}]});
    assert!(
        crate::json::from_slice::<crate::ProcessRunRequest>(req.to_string().as_bytes()).is_err()
    );
}
