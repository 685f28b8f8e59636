//! The layering rule between the supervisor and the backends: the runner's and the
//! server's own code reach the sandbox crate only through `tierbox_sandbox::contract`,
//! and the CLI's own code does not name the sandbox crate at all (it goes through
//! `tierbox_runner::host`). Test code (`tests/`, `*_tests.rs`, `tests.rs`) may reach the
//! backends' internals, which the sandbox crate makes public only with its `test-support`
//! feature; no normal dependency in the workspace may enable that feature (nor any other
//! crate's `test-support`), so a production build has only the contract to reach.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// `(line number, line)` of each line of `text` that names `tierbox_sandbox::` other than
/// `tierbox_sandbox::contract`, or with `contract_ok` false, that names the crate at all.
fn violations(text: &str, contract_ok: bool) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let mut rest = *line;
            while let Some(at) = rest.find("tierbox_sandbox") {
                let after = &rest[at + "tierbox_sandbox".len()..];
                if !(contract_ok && after.starts_with("::contract")) {
                    return true;
                }
                rest = after;
            }
            false
        })
        .map(|(i, line)| (i + 1, line.trim().to_owned()))
        .collect()
}

fn production_sources(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("read a source directory")
            .flatten()
        {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn the_checker_finds_an_internal_path_and_passes_the_contract() {
    let text = "use tierbox_sandbox::contract::RunningSandbox;\n\
                use tierbox_sandbox::linux::audit::Refusal;\n\
                let x = tierbox_sandbox::contract::host_facts(); let y = tierbox_sandbox::tier_b::launch;\n";
    let found = violations(text, true);
    assert_eq!(
        found.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![2, 3],
        "{found:?}"
    );
    assert_eq!(violations(text, false).len(), 3);
}

#[test]
fn the_runner_server_and_cli_reach_the_sandbox_only_through_its_contract() {
    let mut bad = Vec::new();
    for (krate, contract_ok) in [
        ("tierbox-runner", true),
        ("tierbox-server", true),
        ("tierbox-cli", false),
    ] {
        let files = production_sources(&crate_src(krate));
        assert!(!files.is_empty(), "no sources found for {krate}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            for (line, what) in violations(&text, contract_ok) {
                bad.push(format!("{}:{line}: {what}", file.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the supervisor's code names the sandbox crate's internals (use \
         tierbox_sandbox::contract; the CLI uses tierbox_runner::host):\n{}",
        bad.join("\n")
    );
}

/// The crates whose manifest declares a `test-support` feature (their internals made public
/// for tests), by package name.
fn crates_with_test_support(manifests: &[(PathBuf, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (_, text) in manifests {
        let entries = manifest_entries(text);
        let declares = entries
            .iter()
            .any(|(section, key, _)| section == "features" && key == "test-support");
        let name = entries
            .iter()
            .find(|(section, key, _)| section == "package" && key == "name")
            .map(|(_, _, value)| value.trim().trim_matches('"').to_owned());
        if let (true, Some(name)) = (declares, name) {
            out.push(name);
        }
    }
    out
}

/// `(section, key, value)` of each `key = value` of a Cargo manifest, a value that spans
/// lines (an array, an inline table) joined into one; comments dropped.
fn manifest_entries(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending: Option<(String, String)> = None;
    for raw in text.lines() {
        let line = strip_comment(raw);
        if let Some((key, value)) = pending.take() {
            let value = format!("{value} {}", line.trim());
            if balanced(&value) {
                out.push((section.clone(), key, value));
            } else {
                pending = Some((key, value));
            }
            continue;
        }
        let line = line.trim();
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
        } else if let Some((key, value)) = line.split_once('=') {
            let (key, value) = (
                key.trim().trim_matches('"').to_owned(),
                value.trim().to_owned(),
            );
            if balanced(&value) {
                out.push((section.clone(), key, value));
            } else {
                pending = Some((key, value));
            }
        }
    }
    out
}

/// `line` without a `#` comment (a `#` inside a string is kept).
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    for (at, c) in line.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '#' if !in_string => return &line[..at],
            _ => {}
        }
    }
    line
}

/// Whether every `[` and `{` of `value` (outside strings) is closed.
fn balanced(value: &str) -> bool {
    let (mut depth, mut in_string) = (0i32, false);
    for c in value.chars() {
        match c {
            '"' => in_string = !in_string,
            '[' | '{' if !in_string => depth += 1,
            ']' | '}' if !in_string => depth -= 1,
            _ => {}
        }
    }
    depth <= 0
}

/// Whether `section` lists dependencies that are built into the crate itself (normal,
/// build, target-specific, or the workspace's, which members inherit), not dev-only.
fn is_normal_dependency_section(section: &str) -> bool {
    let last = section.rsplit('.').next().unwrap_or(section);
    section == "workspace.dependencies"
        || (matches!(last, "dependencies" | "build-dependencies")
            && !section.contains("dev-dependencies"))
}

/// `line: what` of each place in `text` where a normal dependency, or a feature of the
/// crate, enables `test-support` of one of `gated`.
fn test_support_violations(text: &str, gated: &[String]) -> Vec<String> {
    let enables = |value: &str| value.contains("\"test-support\"");
    let mut bad = Vec::new();
    for (section, key, value) in manifest_entries(text) {
        // `[dependencies.tierbox-sandbox]`: the dependency's own table.
        if let Some((deps, dep)) = section.rsplit_once('.')
            && is_normal_dependency_section(deps)
            && gated.iter().any(|g| g == dep)
            && key == "features"
            && enables(&value)
        {
            bad.push(format!("[{section}] features = {value}"));
        }
        if is_normal_dependency_section(&section) {
            let package = value
                .split("package")
                .nth(1)
                .and_then(|rest| rest.split('"').nth(1))
                .unwrap_or(&key);
            if gated.iter().any(|g| g == package) && enables(&value) {
                bad.push(format!("[{section}] {key} = {value}"));
            }
        }
        // A feature of this crate that turns it on: `x = ["tierbox-sandbox/test-support"]`.
        if section == "features" {
            for g in gated {
                for form in [
                    format!("\"{g}/test-support\""),
                    format!("\"{g}?/test-support\""),
                ] {
                    if value.contains(&form) {
                        bad.push(format!("[features] {key} = {value}"));
                    }
                }
            }
        }
    }
    bad
}

/// The workspace's manifests: the root's and each member's.
fn workspace_manifests() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = std::fs::canonicalize(&root).expect("the workspace's root");
    let read = |path: PathBuf| {
        let text = std::fs::read_to_string(&path).expect("read a Cargo.toml");
        (path, text)
    };
    let root_manifest = read(root.join("Cargo.toml"));
    let members = manifest_entries(&root_manifest.1)
        .into_iter()
        .find(|(section, key, _)| section == "workspace" && key == "members")
        .map(|(_, _, value)| value)
        .expect("the workspace lists its members");
    let mut out = vec![root_manifest];
    for member in members.split('"').skip(1).step_by(2) {
        out.push(read(root.join(member).join("Cargo.toml")));
    }
    out
}

#[test]
fn the_manifest_checker_finds_a_normal_dependency_enabling_test_support() {
    let gated = vec!["tierbox-sandbox".to_owned()];
    let good = r#"
[package]
name = "x"
[dependencies]
tierbox-sandbox.workspace = true
[dev-dependencies]
tierbox-sandbox = { workspace = true, features = ["test-support"] }
[target.'cfg(unix)'.dev-dependencies]
tierbox-sandbox = { workspace = true, features = [
    "test-support",
] }
[dev-dependencies.tierbox-sandbox]
features = ["test-support"]
"#;
    assert_eq!(test_support_violations(good, &gated), Vec::<String>::new());
    let bad = r#"
[dependencies]
tierbox-sandbox = { workspace = true, features = ["test-support"] } # a comment
[target.'cfg(target_os = "linux")'.dependencies]
tierbox-sandbox = { workspace = true, features = [
    "test-support",
] }
[build-dependencies]
sandbox = { package = "tierbox-sandbox", path = "../s", features = ["test-support"] }
[dependencies.tierbox-sandbox]
workspace = true
features = ["test-support"]
[features]
default = ["tierbox-sandbox/test-support"]
[workspace.dependencies]
tierbox-sandbox = { path = "crates/tierbox-sandbox", features = ["test-support"] }
"#;
    let found = test_support_violations(bad, &gated);
    assert_eq!(found.len(), 6, "{found:#?}");
    // A crate declares the feature in its `[features]`.
    let declares = [(
        PathBuf::from("Cargo.toml"),
        "[package]\nname = \"tierbox-sandbox\"\n[features]\ntest-support = []\n".to_owned(),
    )];
    assert_eq!(crates_with_test_support(&declares), gated);
}

#[test]
fn only_dev_dependencies_enable_a_crates_test_support_feature() {
    let manifests = workspace_manifests();
    let gated = crates_with_test_support(&manifests);
    assert!(
        gated.iter().any(|g| g == "tierbox-sandbox"),
        "tierbox-sandbox declares `test-support` (found: {gated:?})"
    );
    let mut bad = Vec::new();
    for (path, text) in &manifests {
        for what in test_support_violations(text, &gated) {
            bad.push(format!("{}: {what}", path.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "a normal dependency enables `test-support`, which makes a crate's internals public \
         in production builds (enable it from [dev-dependencies] only):\n{}",
        bad.join("\n")
    );
}
