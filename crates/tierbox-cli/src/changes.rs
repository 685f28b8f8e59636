//! `tierbox changes`: review mode's kept change sets (see `tierbox_runner::review`).
//!
//! What a run chose — file names, link targets, the workspace's path, file contents in a
//! diff, paths in an error — is printed with its control characters escaped
//! (`tierbox_runner::review::escaped`: BEL as `\x07`, ESC as `\x1b`), to a terminal or
//! not; `--json` prints exact JSON instead.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use tierbox_runner::changes::{Change, ChangeKind};
use tierbox_runner::review::{
    ChangeStore, DEFAULT_DIFF_BYTES, Escape, KeptChanges, ReviewError, escaped, escaped_path,
};

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
    /// with --diff the text changes as a unified diff. Control characters in names and
    /// contents are printed escaped (BEL as \x07, ESC as \x1b); --json is exact.
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
    /// underneath since the run, and (listing them) when flagged changes — a symlink out
    /// of the workspace, a new executable, a `.git` entry, a setuid bit, a device — are
    /// neither named as PATHs nor included with --include-flagged.
    Apply {
        /// The run id.
        run_id: String,
        /// Apply only these paths (relative to the workspace) and what is below them; a
        /// flagged change named exactly is consented to.
        paths: Vec<PathBuf>,
        /// Apply flagged changes too (you have looked at them: `tierbox changes show`).
        #[arg(long)]
        include_flagged: bool,
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
                        print!("{}", escaped(d.as_bytes(), Escape::Text));
                    }
                }
                Ok(())
            })
        }
        ChangesAction::Apply {
            run_id,
            paths,
            include_flagged,
            json,
            state_dir,
        } => {
            let paths = (!paths.is_empty()).then_some(paths.as_slice());
            store(state_dir)
                .apply(&run_id, paths, include_flagged)
                .map(|applied| {
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
                            escaped_path(p)
                        );
                    }
                    for s in &applied.skipped {
                        println!("  {}: skipped ({})", escaped_path(&s.path), s.reason);
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
            let message = e.to_string();
            eprintln!(
                "tierbox: [{}] {}",
                e.code(),
                escaped(message.as_bytes(), Escape::Text)
            );
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
        ReviewError::Flagged { .. } => {
            "look at them first (`tierbox changes show RUN_ID --diff`), then name them or add --include-flagged"
        }
        _ => return None,
    })
}

fn print_summary(k: &KeptChanges) {
    let count = k.changes.changes.len() as u64 + k.changes.omitted;
    let left = k
        .expires_unix_ms
        .saturating_sub(tierbox_runner::review::now_unix_ms())
        / 1000;
    let owner = match k.owner.as_str() {
        "" => "unrecorded",
        o => o,
    };
    println!(
        "run {}: {count} change(s), {} bytes, by {}, workspace {}, kept {}m{}s more{}",
        k.run_id,
        k.bytes,
        escaped_path(std::path::Path::new(owner)),
        escaped_path(&k.workspace),
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
    let mut line = format!("{kind} {}", escaped_path(&c.path));
    if let Some(from) = &c.renamed_from {
        line = format!("{line} (from {})", escaped_path(from));
    }
    match (c.file_type.as_str(), &c.target, c.size, c.mode) {
        ("symlink", Some(t), _, _) => line.push_str(&format!(" -> {}", escaped_path(t))),
        ("dir", _, _, Some(m)) => line.push_str(&format!(" dir {m:o}")),
        (_, _, Some(size), Some(m)) => line.push_str(&format!(" {size} bytes {m:o}")),
        (kind, ..) if kind != "file" => line.push_str(&format!(" {kind}")),
        _ => {}
    }
    if let Some(sha) = &c.sha256 {
        line.push_str(&format!(" sha256:{}", sha.get(..12).unwrap_or(sha)));
    }
    if !c.flags.is_empty() {
        let flags: Vec<&str> = c.flags.iter().map(|f| f.name()).collect();
        line.push_str(&format!(" [{}]", flags.join(", ")));
    }
    println!("{line}");
}
