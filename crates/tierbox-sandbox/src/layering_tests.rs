//! The seam between what every Linux backend shares and the backends: the shared modules
//! (`launch/`, `linux/`) never name a backend (`tier_b`, `tier_c`, `bwrap`, `container`),
//! not even in a doc link. What they need of one is a parameter or a trait the backend
//! implements (`launch::slots::Resident`); what both use lives in the shared module and
//! the backend imports it from there. Test code (`tests.rs`, `*_tests.rs`, `tests/`) may
//! reach a backend.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The backends, as the crate's root modules are named.
const BACKENDS: &[&str] = &["tier_b", "tier_c", "bwrap", "container"];

/// `(line number, line)` of each line of `text` that names a backend by a path:
/// `crate::<backend>`, `super::…::<backend>`, or a backend inside a `crate::{…}` group.
fn violations(text: &str) -> Vec<(usize, String)> {
    let mut hits: Vec<usize> = Vec::new();
    for prefix in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix) {
            let start = from + at;
            from = start + prefix.len();
            if names_a_backend(&text[from..]) {
                hits.push(start);
            }
        }
    }
    let mut lines: Vec<usize> = hits
        .into_iter()
        .map(|at| text[..at].matches('\n').count())
        .collect();
    lines.sort_unstable();
    lines.dedup();
    let all: Vec<&str> = text.lines().collect();
    lines
        .into_iter()
        .map(|i| (i + 1, all.get(i).map_or("", |l| l.trim()).to_owned()))
        .collect()
}

/// Whether the path that `rest` continues (after `crate::` or `super::`) goes to a
/// backend: `tier_b…`, `super::tier_b…`, or `{…, tier_b…}`.
fn names_a_backend(rest: &str) -> bool {
    let mut rest = rest;
    while let Some(more) = rest.strip_prefix("super::") {
        rest = more;
    }
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0usize;
        let end = group
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => return true,
                    '}' => depth -= 1,
                    _ => {}
                }
                false
            })
            .map_or(group.len(), |(i, _)| i);
        // Only the group's own top-level entries are crate-root paths.
        let mut depth = 0usize;
        let mut entry_start = true;
        for (i, c) in group[..end].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => entry_start = true,
                c if c.is_whitespace() => {}
                _ => {
                    if entry_start && depth == 0 && is_backend(&group[i..]) {
                        return true;
                    }
                    entry_start = false;
                }
            }
        }
        return false;
    }
    is_backend(rest)
}

/// Whether `s` starts with a backend's name as a whole identifier.
fn is_backend(s: &str) -> bool {
    BACKENDS.iter().any(|b| {
        s.strip_prefix(b)
            .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    })
}

/// The production `.rs` files beneath `dir` (not `tests.rs`, `*_tests.rs` or `tests/`),
/// added to `out`.
fn collect_production_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read a source directory");
    for path in entries.flatten().map(|e| e.path()) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let test_file = name == "tests.rs" || name.ends_with("_tests.rs");
        if path.is_dir() && name != "tests" {
            collect_production_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !test_file {
            out.push(path);
        }
    }
}

fn production_sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect_production_sources(dir, &mut out);
    out.sort();
    out
}

#[test]
fn the_backend_checker_finds_each_way_of_naming_a_backend() {
    let text = "use crate::linux::step::Step;\n\
                use crate::tier_b::launcher::SlotLauncher;\n\
                let x = crate::launch::slots::SHM_DIR; let y = crate::bwrap::probe_bwrap(None);\n\
                /// See [`crate::tier_c::program_exit`].\n\
                use super::super::container::Engine;\n\
                use crate::{linux::sys, tier_b};\n\
                use crate::{\n    launch::{slots, sys},\n    tier_c::launch,\n};\n\
                use crate::{launch::{tier_b}, linux};\n\
                let n = crate::tier_bx::y; use super::exit::ExitInfo; // tier_b::namespace\n";
    let found = violations(text);
    assert_eq!(
        found.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![2, 3, 4, 5, 6, 7],
        "{found:?}"
    );
    assert_eq!(found[0].1, "use crate::tier_b::launcher::SlotLauncher;");
    let files = production_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/launch"));
    assert!(
        files.iter().any(|f| f.ends_with("launch/slots.rs")),
        "{files:?}"
    );
    assert!(
        !files.iter().any(|f| f.ends_with("launch/slots_tests.rs")),
        "{files:?}"
    );
}

#[test]
fn the_shared_launch_and_linux_modules_name_no_backend() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    for shared in ["launch", "linux"] {
        let files = production_sources(&src.join(shared));
        assert!(!files.is_empty(), "no sources found in src/{shared}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            for (line, what) in violations(&text) {
                bad.push(format!("{}:{line}: {what}", file.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "a shared module names a backend (move what both use into the shared module, or \
         take it as a parameter or a trait the backend implements):\n{}",
        bad.join("\n")
    );
}
