//! `tierbox doctor`: what this host can enforce, and how to fix what it cannot.

use std::process::ExitCode;

use anyhow::Result;
use tierbox_policy::Tier;
use tierbox_sandbox::probe::host_facts;
use tierbox_sandbox::select::tier_available;

pub fn run(json: bool) -> Result<ExitCode> {
    let facts = host_facts();
    let summary = facts.summary();
    let tiers: Vec<serde_json::Value> = [Tier::C, Tier::B, Tier::A]
        .into_iter()
        .map(|t| match tier_available(t, facts) {
            Ok(()) => serde_json::json!({ "tier": t.to_string(), "available": true }),
            Err(reason) => {
                serde_json::json!({ "tier": t.to_string(), "available": false, "reason": reason })
            }
        })
        .collect();
    let mut hints = Vec::new();
    match summary.landlock_abi {
        None => hints.push("landlock: enable it (CONFIG_SECURITY_LANDLOCK=y and `landlock` in the lsm= boot parameter); without it tier b rejects runs".to_owned()),
        Some(abi) if abi < 6 => hints.push(format!("landlock ABI {abi}: signal and abstract-socket scoping need ABI 6 (Linux 6.12); add \"landlock_scopes\" to tier.optional_layers to accept this host")),
        Some(_) => {}
    }
    if !summary.seccomp {
        hints.push("seccomp: the kernel refuses seccomp filters (CONFIG_SECCOMP_FILTER, or a container profile blocks seccomp(2))".to_owned());
    }
    if summary.cgroup_version.is_none() {
        hints.push(format!(
            "cgroups: {} — run the supervisor in a delegated cgroup v2 subtree (e.g. `systemd-run --user -p Delegate=yes --scope tierbox …`) or as root with cgroup v1; without it memory and process limits fall back to rlimits",
            summary.cgroup_detail
        ));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "host": summary, "tiers": tiers, "hints": hints })
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("kernel      {}", summary.kernel);
    println!(
        "supervisor  {}",
        if summary.root {
            "root (children drop every capability)"
        } else {
            "unprivileged"
        }
    );
    println!(
        "landlock    {}",
        summary
            .landlock_abi
            .map_or("unavailable".to_owned(), |a| format!("ABI {a}"))
    );
    println!(
        "seccomp     {}",
        if summary.seccomp {
            "available"
        } else {
            "unavailable"
        }
    );
    println!("cgroup      {}", summary.cgroup_detail);
    println!();
    for t in &tiers {
        let tier = t["tier"].as_str().unwrap_or("?");
        if t["available"].as_bool().unwrap_or(false) {
            println!("tier {tier}      available");
        } else {
            println!(
                "tier {tier}      unavailable: {}",
                t["reason"].as_str().unwrap_or("")
            );
        }
    }
    if !hints.is_empty() {
        println!();
        for h in hints {
            println!("hint: {h}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
