//! `tierbox changes`: review mode's kept change sets (see `tierbox_runner::review`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use tierbox_runner::changes::{Change, ChangeKind};
use tierbox_runner::review::{ChangeStore, DEFAULT_DIFF_BYTES, KeptChanges, ReviewError};

use crate::render::neutralize;

#[derive(Debug, clap::Subcommand)]
pub enum ChangesAction {
    /// The change sets kept for review, oldest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// What a run changed: every path with its kind, size, mode, SHA-256 and flags, and
    /// with --diff the text changes as a unified diff.
    Show {
        /// The run id (`run_id` of the outcome).
        run_id: String,
        /// Also print a unified diff of the text files, cut at --diff-bytes.
        #[arg(long)]
        diff: bool,
        /// Byte budget of --diff.
        #[arg(long, default_value_t = DEFAULT_DIFF_BYTES)]
        diff_bytes: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Apply a run's changes to its workspace, all or nothing; with PATHs only the
    /// changes at or below them. Refuses (naming the path) when the workspace changed
    /// underneath since the run.
    Apply {
        /// The run id.
        run_id: String,
        /// Apply only these paths (relative to the workspace) and what is below them.
        paths: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Drop a run's changes unapplied.
    Discard {
        /// The run id.
        run_id: String,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
}

fn store(state_dir: Option<PathBuf>) -> ChangeStore {
    ChangeStore::new(&state_dir.unwrap_or_else(|| tierbox_runner::RunOptions::default().state_dir))
}

/// Runs a `changes` subcommand: exit 0 on success, 1 when the store refuses (with the
/// error's code and message on stderr).
pub fn run(action: ChangesAction) -> Result<ExitCode> {
    let result = match action {
        ChangesAction::List { json, state_dir } => {
            let kept = store(state_dir).list();
            if json {
                println!("{}", serde_json::to_string_pretty(&kept)?);
            } else if kept.is_empty() {
                println!("no change sets kept");
            } else {
                for k in &kept {
                    print_summary(k);
                }
            }
            Ok(())
        }
        ChangesAction::Show {
            run_id,
            diff,
            diff_bytes,
            json,
            state_dir,
        } => {
            let store = store(state_dir);
            store.get(&run_id).and_then(|kept| {
                let diff = match diff {
                    true => Some(store.diff(&run_id, diff_bytes)?),
                    false => None,
                };
                if json {
                    let mut v = serde_json::to_value(&kept).unwrap_or_default();
                    if let Some(d) = diff {
                        v["diff"] = d.into();
                    }
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                } else {
                    print_summary(&kept);
                    for c in &kept.changes.changes {
                        print_change(c);
                    }
                    if let Some(d) = diff {
                        print!("{}", shown(&d));
                    }
                }
                Ok(())
            })
        }
        ChangesAction::Apply {
            run_id,
            paths,
            json,
            state_dir,
        } => {
            let paths = (!paths.is_empty()).then_some(paths.as_slice());
            store(state_dir).apply(&run_id, paths).map(|applied| {
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&applied).unwrap_or_default()
                    );
                    return;
                }
                println!(
                    "applied {} change(s) of run {run_id}",
                    applied.applied.len()
                );
                for p in &applied.bits_dropped {
                    println!(
                        "  {}: applied without its setuid/setgid bit",
                        shown(&p.display().to_string())
                    );
                }
                for s in &applied.skipped {
                    println!(
                        "  {}: skipped ({})",
                        shown(&s.path.display().to_string()),
                        s.reason
                    );
                }
                if applied.remaining > 0 {
                    println!("{} change(s) still kept", applied.remaining);
                }
            })
        }
        ChangesAction::Discard { run_id, state_dir } => store(state_dir)
            .discard(&run_id)
            .map(|()| println!("discarded the changes of run {run_id}")),
    };
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("tierbox: [{}] {e}", e.code());
            if let Some(hint) = hint(&e) {
                eprintln!("hint: {hint}");
            }
            Ok(ExitCode::from(1))
        }
    }
}

fn hint(e: &ReviewError) -> Option<&'static str> {
    Some(match e {
        ReviewError::NotFound { .. } => "`tierbox changes list` shows the change sets kept",
        ReviewError::Conflict { .. } | ReviewError::ChangedDuringRun { .. } => {
            "apply the other paths by name (`tierbox changes apply RUN_ID PATH…`), or run again on the workspace as it is now"
        }
        _ => return None,
    })
}

/// Text the run chose (paths, link targets), neutralised on a terminal.
fn shown(s: &str) -> String {
    match std::io::stdout().is_terminal() {
        true => neutralize(s).into_owned(),
        false => s.to_owned(),
    }
}

fn print_summary(k: &KeptChanges) {
    let count = k.changes.changes.len() as u64 + k.changes.omitted;
    let left = k
        .expires_unix_ms
        .saturating_sub(tierbox_runner::review::now_unix_ms())
        / 1000;
    println!(
        "run {}: {count} change(s), {} bytes, workspace {}, kept {}m{}s more{}",
        k.run_id,
        k.bytes,
        shown(&k.workspace.display().to_string()),
        left / 60,
        left % 60,
        if k.changes.incomplete {
            " (incomplete)"
        } else {
            ""
        }
    );
}

fn print_change(c: &Change) {
    let kind = match c.kind {
        ChangeKind::Added => "A",
        ChangeKind::Modified => "M",
        ChangeKind::Deleted => "D",
        ChangeKind::Renamed => "R",
    };
    let mut line = format!("{kind} {}", c.path.display());
    if let Some(from) = &c.renamed_from {
        line = format!("{line} (from {})", from.display());
    }
    match (c.file_type.as_str(), &c.target, c.size, c.mode) {
        ("symlink", Some(t), _, _) => line.push_str(&format!(" -> {}", t.display())),
        ("dir", _, _, Some(m)) => line.push_str(&format!(" dir {m:o}")),
        (_, _, Some(size), Some(m)) => line.push_str(&format!(" {size} bytes {m:o}")),
        (kind, ..) if kind != "file" => line.push_str(&format!(" {kind}")),
        _ => {}
    }
    if let Some(sha) = &c.sha256 {
        line.push_str(&format!(" sha256:{}", sha.get(..12).unwrap_or(sha)));
    }
    if !c.flags.is_empty() {
        let flags: Vec<String> = c
            .flags
            .iter()
            .map(|f| {
                serde_json::to_value(f)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            })
            .collect();
        line.push_str(&format!(" [{}]", flags.join(", ")));
    }
    println!("{}", shown(&line));
}
