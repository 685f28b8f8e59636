//! `tierbox policy init|check`: the built-in policy, and a policy file checked with its
//! grants put to every backend.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use tierbox_policy::{Policy, Rejection};

use super::load_policy;
use crate::cli::PolicyAction;
use crate::{new_runner, preflight};

pub fn cmd_policy(action: PolicyAction) -> Result<ExitCode> {
    match action {
        PolicyAction::Init => {
            print!("{}", tierbox_policy::policy::BUILTIN_DEFAULT_POLICY_TOML);
            Ok(ExitCode::SUCCESS)
        }
        PolicyAction::Check { file, workspace } => match load_policy(Some(&file)) {
            Ok(p) => Ok(check_policy_grants(&file, p, workspace)),
            Err(e) => {
                eprintln!("tierbox: {e:#}");
                eprintln!(
                    "hint: docs/policy.md describes every field; `tierbox policy init` prints the built-in policy to start from"
                );
                Ok(ExitCode::from(1))
            }
        },
    }
}

/// `policy check`: the policy loaded; its grants resolved in the workspace and put to
/// every backend. Exit 1 when the grants are refused outright, or when the backend the
/// policy names for Tier C would refuse them at launch.
fn check_policy_grants(file: &Path, policy: Policy, workspace: Option<PathBuf>) -> ExitCode {
    let version = policy.version;
    let tier_c_backend = policy.tier.backend.to_string();
    let mut runner = new_runner(policy);
    if let Some(ws) = workspace {
        runner = runner.with_workspace(ws);
    }
    let plan = match runner.check_grants() {
        Ok(plan) => plan,
        Err(rej @ Rejection::GrantRefused { .. }) => {
            eprintln!(
                "tierbox: rejected [{}]: policy {}: {rej}",
                rej.code(),
                file.display()
            );
            eprintln!("hint: docs/policy.md lists what each filesystem key may name");
            return ExitCode::from(1);
        }
        Err(rej) => {
            println!("ok: {} (version {version})", file.display());
            println!(
                "note: the grants were not checked in {}: [{}] {rej}; pass --workspace",
                runner.workspace().display(),
                rej.code()
            );
            return ExitCode::SUCCESS;
        }
    };
    let findings = tierbox_runner::host::grant_findings(&plan);
    let refused = findings
        .iter()
        .any(|f| f.refuses && f.backend == tier_c_backend);
    if refused {
        println!("refused: {} (version {version})", file.display());
    } else {
        println!("ok: {} (version {version})", file.display());
    }
    println!("grants    checked in {}", plan.workspace.display());
    for f in &findings {
        preflight::print_finding(f);
    }
    ExitCode::from(u8::from(refused))
}
