//! Human-readable rendering. Guest output is hostile: when printing to a terminal, escape
//! sequences and other control characters are made visible instead of interpreted.

use std::io::{IsTerminal, Write};

use tierbox_policy::Plan;
use tierbox_runner::Outcome;

/// Replaces control characters other than newline, tab and carriage return with visible
/// stand-ins (`ESC` becomes `␛`, other C0 characters `^X`), so guest output cannot move
/// the cursor, retitle the window or inject keystrokes into the terminal.
pub fn neutralize(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' | '\r' => out.push(c),
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

pub fn print_outcome(o: &Outcome, tty: bool) {
    let show = |s: &str| {
        if tty {
            neutralize(s).into_owned()
        } else {
            s.to_owned()
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(show(&o.stdout.text).as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(show(&o.stderr.text).as_bytes());
    let mut notes = Vec::new();
    let stopped = if o.tier == "a" {
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
        notes.push(format!("output quota exceeded; {stopped}"));
    }
    if let Some(limit) = o.limit_hit
        && !o.timed_out
        && !o.quota_exceeded
    {
        notes.push(format!(
            "limit hit: {}",
            serde_json::to_string(&limit)
                .unwrap_or_default()
                .trim_matches('"')
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
    for denial in o.egress_denials() {
        notes.push(denial.to_owned());
    }
    if let Some(log) = o.egress.as_ref().filter(|l| l.dropped > 0) {
        notes.push(format!(
            "egress: {} more decisions not recorded",
            log.dropped
        ));
    }
    if !o.enforcement.missing_layers.is_empty() && std::io::stderr().is_terminal() {
        let missing: Vec<String> = o
            .enforcement
            .missing_layers
            .iter()
            .map(|l| l.to_string())
            .collect();
        notes.push(format!("not enforced on this host: {}", missing.join(", ")));
    }
    for note in notes {
        let _ = writeln!(stderr, "tierbox: {note}");
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
        "tier      minimum {}, requested {:?}",
        plan.tier.minimum, plan.tier.requested
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
        "output    {} B per stream, {:?}",
        plan.output.max_bytes, plan.output.mode
    );
    println!("network   {:?}", plan.network.mode);
    if !plan.network.preflight_hosts.is_empty() {
        println!("hosts     {}", plan.network.preflight_hosts.join(" "));
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
    println!("network   none");
}

#[cfg(test)]
mod tests {
    use super::neutralize;

    #[test]
    fn escapes_are_made_visible() {
        assert_eq!(neutralize("a\u{1b}]0;pwned\u{7}b"), "a␛]0;pwned^Gb");
        assert_eq!(neutralize("plain\ttext\n"), "plain\ttext\n");
    }
}
