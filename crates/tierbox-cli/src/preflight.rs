//! Printing what `check` and `policy check` add to a valid plan: the tier and backend this
//! host would pick, and what each Linux backend would refuse or narrow of the filesystem
//! grants ([`tierbox_runner::host::Preflight`]) — so neither approves what `run` refuses.

use serde_json::Value;
use tierbox_runner::host::GrantFinding;

/// Text lines of a preflight's JSON ([`tierbox_runner::host::Preflight::to_json`], from
/// this process or a daemon): the tier and backend, then one line per finding, the
/// selected backend's first.
pub fn print_json(pre: &Value) {
    let backend = pre["backend"].as_str().unwrap_or("");
    match pre["tier"].as_str() {
        Some(tier) => match pre["passed_over"].as_str() {
            Some(why) => println!("runs in   tier {tier}, backend {backend}; passed over: {why}"),
            None => println!("runs in   tier {tier}, backend {backend}"),
        },
        None => println!(
            "runs in   nothing on this host: [{}] {}",
            pre["tier_rejected"]["code"].as_str().unwrap_or(""),
            pre["tier_rejected"]["message"].as_str().unwrap_or("")
        ),
    }
    let mut findings: Vec<&Value> = pre["grant_findings"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let refuses = |f: &Value| f["refuses"] == true;
    findings.sort_by_key(|f| (f["backend"].as_str() != Some(backend), !refuses(f)));
    for f in findings {
        print_line(
            f["backend"].as_str().unwrap_or(""),
            refuses(f),
            f["key"].as_str(),
            f["rule"].as_str().unwrap_or(""),
        );
    }
}

/// One finding as a line: backend, `refuses` or `narrows`, the key and the rule.
pub fn print_finding(f: &GrantFinding) {
    print_line(f.backend, f.refuses, f.key, &f.rule);
}

fn print_line(backend: &str, refuses: bool, key: Option<&str>, rule: &str) {
    let what = if refuses { "refuses" } else { "narrows" };
    let key = key.map(|k| format!("{k}: ")).unwrap_or_default();
    println!("{backend:<9} {what}: {key}{rule}");
}
