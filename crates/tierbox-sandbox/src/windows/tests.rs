#![allow(clippy::unwrap_used)]

use tierbox_policy::{EgressMode, Layer, TierCBackend};

use super::*;
use crate::test_fixtures::{assert_golden, golden_plan};

fn describe(l: &JobLimits) -> String {
    format!(
        "limit_flags = {:#06x}\nkill_on_job_close = {}\ndie_on_unhandled_exception = {}\nactive_process_limit = {}\njob_memory_limit_bytes = {}\nper_process_user_time_100ns = {}\ncpu_rate_control_flags = {:#x}\ncpu_rate_hard_cap = {}\nui_restrictions_class = {:#06x}\nbreakaway_ok = {}\nsilent_breakaway_ok = {}\n",
        l.limit_flags(),
        l.kill_on_job_close,
        l.die_on_unhandled_exception,
        l.active_process_limit,
        l.job_memory_limit_bytes,
        l.per_process_user_time_100ns,
        l.cpu_rate_control_flags(),
        l.cpu_rate_hard_cap,
        l.ui.class(),
        l.breakaway_ok,
        l.silent_breakaway_ok,
    )
}

#[test]
fn golden_limit_sets_for_the_shipped_policies() {
    for policy in ["strict", "build-with-caches"] {
        let plan = golden_plan(&format!("{policy}.toml"));
        let limits = job_limits(&plan, 8);
        assert_golden(&format!("windows-{policy}.limits"), &describe(&limits));
    }
}

#[test]
fn limits_follow_the_plan_and_never_allow_breakaway() {
    let plan = golden_plan("build-with-caches.toml");
    let l = job_limits(&plan, 8);
    assert_eq!(l.active_process_limit, 1024);
    assert_eq!(l.job_memory_limit_bytes, 4 << 30);
    assert_eq!(l.per_process_user_time_100ns, 300 * TICKS_PER_SECOND);
    assert_eq!(l.cpu_rate_hard_cap, 2500);
    let f = l.limit_flags();
    assert_eq!(
        f & (flags::LIMIT_BREAKAWAY_OK | flags::LIMIT_SILENT_BREAKAWAY_OK),
        0
    );
    for bit in [
        flags::LIMIT_KILL_ON_JOB_CLOSE,
        flags::LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
        flags::LIMIT_ACTIVE_PROCESS,
        flags::LIMIT_JOB_MEMORY,
        flags::LIMIT_PROCESS_TIME,
    ] {
        assert_eq!(f & bit, bit, "{bit:#x}");
    }
    assert_eq!(l.ui.class(), 0xff, "every UI restriction");
    assert_eq!(l.cpu_rate_control_flags(), 0x5, "enabled, hard cap");
}

#[test]
fn the_cpu_rate_is_hundredths_of_a_percent_clamped() {
    let mut plan = golden_plan("strict.toml");
    plan.limits.cpus = Some(1);
    assert_eq!(job_limits(&plan, 4).cpu_rate_hard_cap, 2500);
    assert_eq!(job_limits(&plan, 3).cpu_rate_hard_cap, 3333);
    plan.limits.cpus = Some(64);
    assert_eq!(job_limits(&plan, 4).cpu_rate_hard_cap, CPU_RATE_FULL);
    plan.limits.cpus = Some(1);
    assert_eq!(
        job_limits(&plan, 100_000).cpu_rate_hard_cap,
        1,
        "never 0 (disabled)"
    );
    assert_eq!(job_limits(&plan, 0).cpu_rate_hard_cap, CPU_RATE_FULL);
}

#[test]
fn a_blocked_network_needs_the_policy_to_accept_it_unenforced() {
    // The shipped strict policy blocks the network and does not accept that a Job
    // Object cannot: refused, with the reason.
    let plan = golden_plan("strict.toml");
    assert_eq!(plan.network.mode, EgressMode::BlockAll);
    let err = check_layers(&plan).unwrap_err();
    assert_eq!(err.code(), "tier.unavailable");
    assert!(err.to_string().contains("filesystem_isolation"), "{err}");
    let mut plan = golden_plan("strict.toml");
    plan.tier.optional_layers.push(Layer::FilesystemIsolation);
    let err = check_layers(&plan).unwrap_err();
    assert!(err.to_string().contains("network_isolation"), "{err}");
    plan.tier.optional_layers.push(Layer::NetworkIsolation);
    assert_eq!(
        check_layers(&plan).unwrap(),
        [
            Layer::ProtectedPaths,
            Layer::Disk,
            Layer::NetworkIsolation,
            Layer::FilesystemIsolation
        ]
    );
    // allow_all promises no restriction, so nothing is missing for the network.
    let mut plan = golden_plan("strict.toml");
    plan.tier.optional_layers.push(Layer::FilesystemIsolation);
    plan.network.mode = EgressMode::AllowAll;
    assert_eq!(
        check_layers(&plan).unwrap(),
        [
            Layer::ProtectedPaths,
            Layer::Disk,
            Layer::FilesystemIsolation
        ]
    );
    plan.tier.backend = TierCBackend::Docker;
    assert!(check_layers(&plan).is_err());
}

#[test]
fn quoting_follows_the_msvcrt_rules() {
    for (arg, quoted) in [
        ("a", "a"),
        ("", "\"\""),
        ("a b", "\"a b\""),
        ("a\tb", "\"a\tb\""),
        ("a\"b", r#""a\"b""#),
        (r"a\b", r"a\b"),
        (r"a\\b", r"a\\b"),
        (r"a\", r"a\"),
        (r"a b\", r#""a b\\""#),
        (r"a b\\", r#""a b\\\\""#),
        (r#"a\"b"#, r#""a\\\"b""#),
        (r#"\\"x"#, r#""\\\\\"x""#),
        ("\"", r#""\"""#),
    ] {
        assert_eq!(quote_arg(arg), quoted, "{arg:?}");
        assert_eq!(split_like_msvcrt(&quoted_line(arg)), ["p", arg], "{arg:?}");
    }
}

fn quoted_line(arg: &str) -> String {
    command_line(&["p", arg]).unwrap()
}

/// The MSVCRT splitting rules (after the program name), to check that quoting
/// round-trips.
fn split_like_msvcrt(line: &str) -> Vec<String> {
    let (program, rest) = line.split_once(' ').unwrap();
    let mut out = vec![program.to_owned()];
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    let mut cur = String::new();
    let mut in_arg = false;
    let mut quoted = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let start = i;
            while i < chars.len() && chars[i] == '\\' {
                i += 1;
            }
            let n = i - start;
            if i < chars.len() && chars[i] == '"' {
                cur.extend(std::iter::repeat_n('\\', n / 2));
                if n % 2 == 1 {
                    cur.push('"');
                    i += 1;
                }
            } else {
                cur.extend(std::iter::repeat_n('\\', n));
            }
            in_arg = true;
            continue;
        }
        if c == '"' {
            quoted = !quoted;
            in_arg = true;
        } else if (c == ' ' || c == '\t') && !quoted {
            if in_arg {
                out.push(std::mem::take(&mut cur));
                in_arg = false;
            }
        } else {
            cur.push(c);
            in_arg = true;
        }
        i += 1;
    }
    if in_arg {
        out.push(cur);
    }
    out
}

#[test]
fn the_program_name_is_quoted_by_its_own_rules() {
    assert_eq!(
        command_line(&[r"C:\Program Files\x.exe", "a"]).unwrap(),
        r#""C:\Program Files\x.exe" a"#
    );
    assert_eq!(command_line(&[r"C:\x.exe"]).unwrap(), r"C:\x.exe");
    assert_eq!(
        command_line(&["a\"b.exe"]),
        Err(CommandLineError::QuoteInProgram)
    );
    assert_eq!(
        command_line(&["x.exe", "a\0b"]),
        Err(CommandLineError::Nul { index: 1 })
    );
    assert_eq!(command_line::<&str>(&[]), Err(CommandLineError::Empty));
}

#[test]
fn the_environment_block_is_sorted_and_exact() {
    let env = vec![
        ("path".to_owned(), "C:\\bin".to_owned()),
        ("HOME".to_owned(), "C:\\h".to_owned()),
        ("Zed".to_owned(), "".to_owned()),
    ];
    let block = environment_block(&env).unwrap();
    assert_eq!(
        String::from_utf16(&block).unwrap(),
        "HOME=C:\\h\0path=C:\\bin\0Zed=\0\0"
    );
    assert_eq!(environment_block(&[]).unwrap(), [0, 0]);
    for bad in [("A=B", "1"), ("", "1"), ("A", "x\0y")] {
        let env = vec![(bad.0.to_owned(), bad.1.to_owned())];
        assert!(environment_block(&env).is_err(), "{bad:?}");
    }
}
