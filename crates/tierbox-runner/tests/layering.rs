//! The layering rule between the supervisor and the backends: the runner's and the
//! server's own code reach the sandbox crate only through `tierbox_sandbox::contract`,
//! and the CLI's own code does not name the sandbox crate at all (it goes through
//! `tierbox_runner::host`). Test code (`tests/`, `*_tests.rs`, `tests.rs`) may reach the
//! backends' internals.

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
