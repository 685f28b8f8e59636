//! Human-readable rendering. Guest output is hostile: when printing to a terminal, escape
//! sequences and other control characters are made visible instead of interpreted.

use std::io::Write;

use tierbox_policy::{Plan, Policy};
use tierbox_runner::Outcome;

/// Replaces control characters other than newline and tab with visible stand-ins (`ESC`
/// becomes `␛`, BEL `^G`, a carriage return not ending a line `^M`, other C0 characters
/// `^X`, C1 characters `�`), so guest output cannot move the cursor, overwrite what was
/// printed (`\r`), retitle the window, ring the bell or inject keystrokes into the
/// terminal. A `\r\n` line ending stays: `"ok\rFAKE\r\n"` prints as `ok^MFAKE` and a
/// line break.
pub fn neutralize(text: &str) -> std::borrow::Cow<'_, str> {
    let bare_cr = |i: usize| text.as_bytes().get(i + 1) != Some(&b'\n');
    // Shown as it is: newline, tab, and a carriage return ending a line.
    let kept = |i: usize, c: char| matches!(c, '\n' | '\t') || (c == '\r' && !bare_cr(i));
    if !text
        .char_indices()
        .any(|(i, c)| c.is_control() && !kept(i, c))
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        match c {
            c if kept(i, c) => out.push(c),
            '\u{1b}' => out.push('␛'),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c if c.is_control() => out.push('�'),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Prints the notes about an ended run to stderr: how it ended when the program did not
/// end it by itself ([`ending_notes`]), truncation and redaction, git repositories the
/// run created, the denials that may explain its end. The program's own output was
/// already printed as it arrived (`crate::live`). The notes carry text the program chose
/// (hosts it asked for, directories it created), so they are neutralised
/// ([`neutralize`]) when stderr is a terminal.
pub fn print_notes(o: &Outcome, stderr_tty: bool, policy: &Policy) {
    let mut notes = ending_notes(o, policy);
    notes.extend(other_notes(o));
    print(&notes, stderr_tty);
}

/// Prints how the run ended when the program did not end it by itself ([`ending_notes`]):
/// with `--json` too, since that line is what tells tierbox's reserved exit statuses from
/// the same status of the program's own.
pub fn print_ending(o: &Outcome, policy: &Policy, stderr_tty: bool) {
    print(&ending_notes(o, policy), stderr_tty);
}

/// Each note as a `tierbox:` line on stderr, neutralised for a terminal.
fn print(notes: &[String], stderr_tty: bool) {
    let mut stderr = std::io::stderr().lock();
    for note in notes {
        let note = if stderr_tty {
            neutralize(note)
        } else {
            std::borrow::Cow::Borrowed(note.as_str())
        };
        let _ = writeln!(stderr, "tierbox: {note}");
    }
}

/// How the run ended when the program did not end it by itself: the sandbox failed (exit
/// 123), the deadline (124), the output quota, a limit (Tier A's: 122), a signal.
fn ending_notes(o: &Outcome, policy: &Policy) -> Vec<String> {
    let mut notes = Vec::new();
    let stopped = if o.tier == tierbox_policy::Tier::A {
        "the guest was stopped"
    } else {
        "the process tree was killed"
    };
    if let Some(failure) = &o.sandbox_failure {
        notes.push(format!(
            "{failure} (exit status {})",
            tierbox_runner::SANDBOX_FAILURE_EXIT_STATUS
        ));
    }
    if o.timed_out {
        notes.push(format!("timed out after {} ms; {stopped}", o.duration_ms));
    }
    if o.quota_exceeded {
        notes.push(format!(
            "output quota exceeded (output.max_bytes = {} bytes per stream); {stopped}",
            policy.output.max_bytes
        ));
    }
    if let Some(limit) = o.limit_hit
        && !o.timed_out
        && !o.quota_exceeded
        // Said with what the program got, among the other notes.
        && limit != tierbox_runner::LimitHit::Stdin
    {
        let tier_a = o.tier == tierbox_policy::Tier::A;
        let key = limit.policy_key(tier_a);
        let value = match limit.policy_value(policy, tier_a) {
            Some(v) => format!(" = {v}"),
            None => String::new(),
        };
        notes.push(format!("limit hit: {} ({key}{value})", limit.name()));
    }
    if let Some(sig) = o.signal
        && o.sandbox_failure.is_none()
        && !o.timed_out
        && !o.quota_exceeded
    {
        let name = o
            .signal_name
            .clone()
            .unwrap_or_else(|| format!("signal {sig}"));
        notes.push(format!(
            "the program was killed by {name} (exit status {})",
            o.exit_status()
        ));
    }
    notes
}

/// The notes about what the run left and met: truncation, redaction, repositories and
/// protected paths it changed, review mode's change set, its denials.
fn other_notes(o: &Outcome) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(stdin) = o.stdin.as_ref().filter(|s| s.limit_hit) {
        notes.push(format!(
            "limit hit: stdin: the program's stdin was closed after {} bytes, and more was offered (limits.stdin_bytes, or the request's stdin_limit_bytes: {} bytes)",
            stdin.bytes, stdin.limit_bytes
        ));
    }
    for (name, s) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        if s.truncated {
            notes.push(format!(
                "{name} truncated: {} of {} bytes omitted",
                s.omitted_bytes, s.total_bytes
            ));
        }
        if s.redacted {
            notes.push(format!("{name}: secrets redacted"));
        }
        if s.live_dropped_bytes > 0 {
            notes.push(format!(
                "{name}: {} bytes were not printed as the run went (the live stream fell behind); the outcome (--json) has them",
                s.live_dropped_bytes
            ));
        }
        if let Some(e) = &s.spill_error {
            notes.push(format!("{name}: spill: {e}"));
        }
    }
    if !o.created_git_dirs.is_empty() {
        let dirs: Vec<String> = o
            .created_git_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        notes.push(format!(
            "the run created git repositories, untrusted content for this host (their .git/config can run code when git runs there): {}",
            dirs.join(", ")
        ));
    }
    if !o.protected_changed.is_empty() {
        let paths: Vec<String> = o
            .protected_changed
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        notes.push(format!(
            "the run changed protected paths tier b could not keep read-only, untrusted content for this host (git runs what they hold): {}",
            paths.join(", ")
        ));
    }
    if let Some(why) = &o.created_git_dirs_incomplete {
        notes.push(format!(
            "the search for git repositories the run created stopped ({why}): it may have made repositories not named here; treat every .git in the workspace as untrusted"
        ));
    }
    if let Some(set) = &o.changes {
        notes.push(review_note(o, set));
    }
    if let Some(line) = denials_line(o) {
        notes.push(line);
    }
    if let Some(log) = o.egress.as_ref().filter(|l| l.dropped > 0) {
        notes.push(format!(
            "egress: {} more decisions not recorded",
            log.dropped
        ));
    }
    notes
}

/// A setting as the policy and the JSON spell it (`truncate`, `block_all`, `auto`), not
/// as the Rust type is named.
fn policy_word<T: serde::Serialize + std::fmt::Debug>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{value:?}"),
    }
}

pub fn print_plan(plan: &Plan) {
    println!("ok: the request is valid; nothing was run");
    println!("program   {}", plan.program.display());
    println!("argv      {:?}", plan.argv);
    println!("cwd       {}", plan.cwd.display());
    println!("workspace {}", plan.workspace.display());
    let names: Vec<&str> = plan.env.iter().map(|(k, _)| k.as_str()).collect();
    println!("env       {}", names.join(" "));
    println!(
        "tier      minimum {}, requested {}",
        plan.tier.minimum,
        policy_word(&plan.tier.requested)
    );
    println!(
        "limits    timeout {} ms, cpu {} s, memory {} B, processes {}, open files {}, file size {} B",
        plan.limits.wall_timeout_ms,
        plan.limits.cpu_time_secs,
        plan.limits.memory_bytes,
        plan.limits.max_processes,
        plan.limits.open_files,
        plan.limits.file_size_bytes
    );
    println!(
        "output    {} B per stream, {}",
        plan.output.max_bytes,
        policy_word(&plan.output.mode)
    );
    println!("network   {}", policy_word(&plan.network.mode));
    if !plan.network.preflight_hosts.is_empty() {
        println!("hosts     {}", plan.network.preflight_hosts.join(" "));
    }
    print_terminated(plan);
    print_reach(plan);
}

/// The ports the run publishes and the host ports it reaches, each with what this host
/// shows of it now (a published host port must be free; a host port is only useful when
/// something listens on it).
fn print_reach(plan: &Plan) {
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    for p in &plan.network.publish {
        let here = match TcpListener::bind((Ipv4Addr::LOCALHOST, p.host_port)) {
            Ok(_) => "free here".to_owned(),
            Err(e) => format!("NOT free here: {e}"),
        };
        println!(
            "publish   host 127.0.0.1:{} -> the sandbox's 127.0.0.1:{} ({here}; every local user can connect)",
            p.host_port, p.sandbox_port
        );
    }
    for port in &plan.network.host_ports {
        let here = match TcpStream::connect((Ipv4Addr::LOCALHOST, *port)) {
            Ok(_) => "something listens here",
            Err(_) => "nothing listens here now",
        };
        println!("host port the sandbox's 127.0.0.1:{port} -> host 127.0.0.1:{port} ({here})");
    }
    for s in &plan.network.unix_sockets {
        let variable = match &s.variable {
            Some(v) => format!("; the run's {v} points at it"),
            None => String::new(),
        };
        println!(
            "unix socket {} (from {}; owner uid {}, mode {:o}{variable})",
            s.path.display(),
            s.entry,
            s.uid,
            s.mode
        );
        if s.privileged {
            let path = s.path.display().to_string();
            println!(
                "warning: {}",
                tierbox_runner::PrivilegedSocketWarning(&path)
            );
        }
    }
}

/// The hosts whose TLS the proxy terminates, their rules, and each credential: where it
/// goes, the variable the program sees, and whether its secret can be read here (as the
/// run would read it; in this process, which is the supervisor only for an in-process
/// run).
fn print_terminated(plan: &Plan) {
    for (host, t) in &plan.network.terminated {
        let rules = match t.allow.is_empty() {
            true => "every request".to_owned(),
            false => t.allow.join(", "),
        };
        println!("terminate {host}: {rules}");
        for c in &t.credentials {
            let place = match (&c.header, &c.query) {
                (Some(h), _) => format!("header {h}"),
                (None, Some(q)) => format!("query {q}"),
                (None, None) => "nowhere".to_owned(),
            };
            let source = match (&c.secret.env, &c.secret.file) {
                (Some(v), _) => format!("the supervisor's {v}"),
                (None, Some(f)) => f.display().to_string(),
                (None, None) => "none".to_owned(),
            };
            use tierbox_runner::RunError;
            let status = match tierbox_runner::terminate::secret_status(plan, c) {
                Ok(()) => "readable here".to_owned(),
                Err(RunError::Rejected(tierbox_policy::Rejection::TerminationUnavailable {
                    reason,
                    ..
                })) => {
                    format!("NOT readable here: {reason}")
                }
                Err(other) => format!("NOT readable here: {other}"),
            };
            println!(
                "  credential {}: {place}, placeholder in ${}, secret from {source} ({status})",
                c.name, c.env
            );
        }
    }
}

pub fn print_wasm_plan(plan: &tierbox_policy::wasm::WasmPlan) {
    use tierbox_policy::wasm::ModuleSource;
    println!("ok: the request is valid; nothing was run");
    match &plan.module {
        ModuleSource::File(p) => println!("module    {}", p.display()),
        ModuleSource::Inline(b) => println!("module    inline, {} bytes", b.len()),
    }
    println!("tier      a (wasmtime), entrypoint {}", plan.entrypoint);
    println!("argv      {:?}", plan.argv);
    for p in &plan.preopens {
        println!(
            "preopen   {} -> {} ({})",
            p.guest,
            p.host.display(),
            if p.writable {
                "read_write"
            } else {
                "read_only"
            }
        );
    }
    let names: Vec<&str> = plan.env.iter().map(|(k, _)| k.as_str()).collect();
    println!("env       {}", names.join(" "));
    let l = &plan.limits;
    println!(
        "limits    timeout {} ms, fuel {}, memory {} B, table elements {}, instances {}, module {} B",
        l.wall_timeout_ms,
        l.fuel,
        l.memory_bytes,
        l.table_elements,
        l.instances,
        l.max_module_bytes
    );
    println!(
        "output    {} B per stream, {:?}",
        plan.output.max_bytes, plan.output.mode
    );
    if plan.network.is_empty() {
        println!("network   none");
    }
    for g in &plan.network {
        let addrs: Vec<String> = g.addrs.iter().map(ToString::to_string).collect();
        println!(
            "network   tcp {}:{} -> {} (resolved now, once; lookups of any other name are refused)",
            g.host,
            g.port,
            addrs.join(", ")
        );
    }
}

/// Most denials the CLI's one-line summary names (the outcome has them all).
pub const DENIALS_SHOWN: usize = 3;

/// The one-line summary of what the run was refused, with the policy change that would
/// allow it: `2 denials: connect pypi.org:443 (egress), …; to allow: egress.allow +=
/// "pypi.org:443"; …; see --json`. Only the denials that may explain how the run ended
/// ([`tierbox_runner::denials::worth_naming`]: not the sockets a program that succeeded
/// tried, such as the unix socket of libc's name service); limits have their own note.
fn denials_line(o: &Outcome) -> Option<String> {
    let listed = tierbox_runner::denials::worth_naming(&o.denials, o.success());
    if listed.is_empty() {
        return None;
    }
    let shown: Vec<String> = listed
        .iter()
        .take(DENIALS_SHOWN)
        .map(|d| {
            let times = match d.count {
                1 => String::new(),
                n => format!(", {n} times"),
            };
            format!("{} ({}{times})", d.short(), d.layer.name())
        })
        .collect();
    let no_policy =
        |d: &&&tierbox_runner::denials::Denial| d.hint.starts_with("not allowed by any policy");
    let mut fixes: Vec<&str> = listed
        .iter()
        .take(DENIALS_SHOWN)
        .filter(|d| !no_policy(d))
        .map(|d| d.hint.as_str())
        .collect();
    fixes.dedup();
    let refused_by_all = listed.iter().filter(no_policy).count();
    let more = match listed.len().saturating_sub(DENIALS_SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let mut advice = Vec::new();
    if !fixes.is_empty() {
        advice.push(format!("to allow: {}", fixes.join("; ")));
    }
    if refused_by_all > 0 {
        advice.push(format!("{refused_by_all} not allowed by any policy"));
    }
    advice.push("see --json".to_owned());
    Some(format!(
        "{} denial{}: {}{more}; {}",
        listed.len(),
        if listed.len() == 1 { "" } else { "s" },
        shown.join(", "),
        advice.join("; ")
    ))
}

/// The note after an overlay (review mode) run: what it changed, and how to go on.
fn review_note(o: &Outcome, set: &tierbox_runner::changes::ChangeSet) -> String {
    if let Some(e) = &o.changes_error {
        return format!(
            "review mode: the change set could not be kept ({e}); the workspace is unchanged"
        );
    }
    if set.is_empty() {
        return "review mode: the run changed nothing in the workspace".to_owned();
    }
    let count = set.changes.len() as u64 + set.omitted;
    let flagged = set.changes.iter().filter(|c| !c.flags.is_empty()).count();
    let consent = set
        .changes
        .iter()
        .any(|c| c.flags.iter().any(|f| f.needs_consent()));
    let flagged = match flagged {
        0 => String::new(),
        n => format!(", {n} flagged"),
    };
    let consent = match consent {
        true => " (flagged changes need their paths named, or --include-flagged)",
        false => "",
    };
    let evicted = match o.changes_evicted.as_slice() {
        [] => String::new(),
        sets => format!(
            "; to make room, {} older change set(s) of the same owner were removed unapplied (workspace.keep_changes_*): {}",
            sets.len(),
            sets.iter()
                .map(|e| e.run_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!(
        "review mode: {count} change(s){flagged} kept, the workspace unchanged; `tierbox changes show {id}` to review, `tierbox changes apply {id}`{consent} or `tierbox changes discard {id}`{evicted}",
        id = o.run_id
    )
}

#[cfg(test)]
mod tests {
    use super::neutralize;

    #[test]
    fn escapes_are_made_visible() {
        assert_eq!(neutralize("a\u{1b}]0;pwned\u{7}b"), "a␛]0;pwned^Gb");
        assert_eq!(neutralize("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(neutralize("bell\u{7}"), "bell^G");
        assert_eq!(neutralize("\u{9b}31m"), "�31m");
    }

    /// Regression: `\r` reached the terminal raw, so output could overwrite what it had
    /// printed (`PASS\rFAIL` shows `FAIL`). A `\r\n` line ending stays as it is.
    #[test]
    fn carriage_returns_cannot_overwrite_a_line() {
        assert_eq!(
            neutralize("tests: FAIL\rtests: ok  \n"),
            "tests: FAIL^Mtests: ok  \n"
        );
        assert_eq!(
            neutralize("line one\r\nline two\r\n"),
            "line one\r\nline two\r\n"
        );
        assert_eq!(neutralize("end\r"), "end^M");
        assert_eq!(neutralize("\r\r\n"), "^M\r\n");
    }
}
