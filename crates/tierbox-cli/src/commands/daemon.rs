//! `tierbox daemon start|stop|status`: the local daemon that `run` hands its requests to.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::load_policy;
use crate::cli::DaemonAction;
use crate::daemon;

pub fn cmd_daemon(action: DaemonAction) -> Result<ExitCode> {
    let state =
        |dir: Option<PathBuf>| dir.unwrap_or_else(tierbox_runner::supervisor::default_state_dir);
    match action {
        DaemonAction::Start { policy, state_dir } => {
            let mut args: Vec<std::ffi::OsString> = Vec::new();
            if let Some(p) = &policy.policy {
                args.push("--policy".into());
                args.push(
                    std::fs::canonicalize(p)
                        .unwrap_or_else(|_| p.clone())
                        .into(),
                );
            }
            if let Some(w) = &policy.workspace {
                args.push("--workspace".into());
                args.push(
                    std::fs::canonicalize(w)
                        .unwrap_or_else(|_| w.clone())
                        .into(),
                );
            }
            if let Some(d) = &state_dir {
                args.push("--state-dir".into());
                args.push(d.into());
            }
            // The policy must load here, with the error a run would give.
            load_policy(policy.policy.as_deref())?;
            let (pid, socket) = daemon::start(&args, &state(state_dir))?;
            println!(
                "tierbox: daemon started (pid {pid}) on {}",
                socket.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        DaemonAction::Stop { state_dir } => {
            let pid = daemon::stop(&state(state_dir))?;
            println!("tierbox: daemon (pid {pid}) stopped");
            Ok(ExitCode::SUCCESS)
        }
        DaemonAction::Status { state_dir, json } => {
            let dir = state(state_dir);
            let socket = daemon::socket_path(&dir);
            match daemon::identity(&socket, &dir) {
                Ok((pid, id)) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "running": true, "pid": pid, "socket": socket, "identity": id })
                        );
                    } else {
                        println!(
                            "tierbox: daemon running (pid {pid}) on {}",
                            socket.display()
                        );
                        println!("  workspace  {}", id.workspace.display());
                        println!("  state dir  {}", id.state_dir.display());
                        println!("  policy     sha256:{}", id.policy_digest);
                        println!("  version    {}", id.version);
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "running": false, "socket": socket, "reason": format!("{e:#}") })
                        );
                    } else {
                        println!("tierbox: no daemon on {}: {e:#}", socket.display());
                    }
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}
