//! What the CLI says about itself is true: a denial line only for refusals that may
//! explain the run's end, each with a key that, applied, lets it through.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::{tier_b_available, tierbox};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON `out` printed on stdout.
#[track_caller]
fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// `version = 1` and `body`, as the policy file `name` in `dir`.
fn policy(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("version = 1\n{body}\n")).unwrap();
    path
}

/// The outcome's refused `socket` calls whose target starts with `family`.
fn socket_denials<'a>(v: &'a serde_json::Value, family: &str) -> Vec<&'a serde_json::Value> {
    v["denials"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|d| {
            d["layer"] == "seccomp"
                && d["operation"] == "socket"
                && d["target"].as_str().is_some_and(|t| t.starts_with(family))
        })
        .collect()
}

/// The `tierbox run` options that apply a Tier B socket denial's `hint` — a policy
/// allowing `programs` written into `dir`, and the tier — or a panic naming a hint no
/// test knows how to apply.
fn apply_hint(hint: &str, dir: &Path, programs: &str) -> Vec<String> {
    let exec = format!(
        "[exec]\nallowed_executables = [{programs}]\nallow_interpreters = true\nallow_eval = true\n"
    );
    let with = |name: &str, egress: &str| {
        let p = policy(dir, name, &format!("{exec}[egress]\n{egress}"));
        ["--tier", "b", "--policy", p.to_str().unwrap()]
            .map(str::to_owned)
            .to_vec()
    };
    if hint.starts_with("tier = \"c\" in the request (--tier c)") {
        let mut args = with("as-is.toml", "mode = \"block_all\"");
        args[1] = "c".to_owned();
        args
    } else if hint.starts_with("egress.mode = \"preflight\"") {
        with("preflight.toml", "mode = \"preflight\"")
    } else if hint.starts_with("egress.mode = \"strict\" with egress.allow += \"HOST:PORT\"") {
        with(
            "strict.toml",
            "mode = \"strict\"\nallow = [\"example.com:443\"]",
        )
    } else if hint.starts_with("egress.mode = \"allow_all\"") {
        with("allow-all.toml", "mode = \"allow_all\"")
    } else {
        panic!("a hint this test cannot apply: {hint}");
    }
}

/// Regression: every Tier B program that looked a user or a host up (`id`, `ls -l`,
/// `curl`) printed `1 denial: socket AF_UNIX … to allow: egress.mode = "allow_all"`,
/// although libc's name service goes on without the socket. `id` prints no denial line;
/// the outcome still lists the refusal, with a hint that — applied — lets it through,
/// and that is not `allow_all` when Tier C runs here.
#[test]
fn a_tier_b_lookup_prints_no_denial_line_and_its_hint_is_true() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let out = tierbox(&["run", "--tier", "b", "-w", w, "--", "id"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("denial"), "{}", stderr(&out));

    let v = json(&tierbox(
        &["run", "--tier", "b", "--json", "-w", w, "--", "id"],
        None,
    ));
    let Some(&unix) = socket_denials(&v, "AF_UNIX").first() else {
        tierbox_test_support::skip_here(&format!(
            "no unix socket refusal of `id` recorded here (denials {}; needs seccomp user notification and a libc that tries nscd)",
            v["denials"]
        ));
        return;
    };
    let hint = unix["hint"].as_str().unwrap();
    if !hint.starts_with("egress.mode = \"allow_all\"") {
        assert!(!hint.contains("allow_all"), "{hint}");
    }
    let policies = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["run", "--json", "-w", w].map(str::to_owned).to_vec();
    args.extend(apply_hint(hint, policies.path(), "\"id\""));
    args.extend(["--".to_owned(), "id".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let applied = json(&tierbox(&args, None));
    assert_eq!(applied["exit_code"], 0, "{applied}");
    assert!(
        socket_denials(&applied, "AF_UNIX").is_empty(),
        "{hint}: {}",
        applied["denials"]
    );
}

/// A refused socket is named when the program fails (here: each is the only thing it
/// tries), and each socket hint — a unix socket's, UDP's, TCP's — applied as it says,
/// lets the program through.
///
/// Regression: a TCP socket with its protocol named (`curl http://127.0.0.1/`) and a UDP
/// one were told `egress.mode = "allow_all" or "preflight"`, a unix socket `allow_all`.
#[test]
fn a_refused_socket_is_named_when_the_program_fails_and_every_hint_is_true() {
    if !tier_b_available() {
        return;
    }
    if !Path::new("/usr/bin/python3").is_file() {
        tierbox_test_support::skip_here("no /usr/bin/python3 to open sockets with");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let policies = tempfile::tempdir().unwrap();
    let blocked = policy(
        policies.path(),
        "blocked.toml",
        "[exec]\nallowed_executables = [\"python3\"]\nallow_interpreters = true\nallow_eval = true\n[egress]\nmode = \"block_all\"",
    );
    let blocked = blocked.to_str().unwrap();
    for (family, kind, protocol, named) in [
        ("AF_UNIX", "SOCK_STREAM", "0", ""),
        ("AF_INET", "SOCK_DGRAM", "0", ""),
        ("AF_INET", "SOCK_STREAM", "0", ""),
        (
            "AF_INET",
            "SOCK_STREAM",
            "socket.IPPROTO_TCP",
            ", protocol 6 (TCP)",
        ),
    ] {
        let code =
            format!("import socket; socket.socket(socket.{family}, socket.{kind}, {protocol})");
        let run = |extra: &[&str]| {
            let mut args = vec!["run", "-w", w];
            args.extend_from_slice(extra);
            args.extend(["--", "python3", "-c", &code]);
            tierbox(&args, None)
        };
        let out = run(&["--tier", "b", "--policy", blocked]);
        assert_ne!(
            out.status.code(),
            Some(0),
            "{family} {kind}: {}",
            stderr(&out)
        );
        let line = format!("tierbox: 1 denial: socket {family}, {kind}{named} (seccomp)");
        let v = json(&run(&["--tier", "b", "--policy", blocked, "--json"]));
        let Some(&denial) = socket_denials(&v, family).first() else {
            tierbox_test_support::skip_here(&format!(
                "no socket refusal recorded here (denials {}; needs seccomp user notification)",
                v["denials"]
            ));
            return;
        };
        assert!(stderr(&out).contains(&line), "{line}: {}", stderr(&out));
        let hint = denial["hint"].as_str().unwrap();
        // The narrowest key: never allow_all while one lets it through — for a unix
        // socket, Tier C where it runs here.
        if family == "AF_UNIX" && hint.contains("allow_all") {
            assert!(hint.contains("does not run here"), "{hint}");
        } else {
            assert!(
                !hint.contains("allow_all"),
                "{family} {kind} {protocol}: {hint}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let applied = apply_hint(hint, dir.path(), "\"python3\"");
        let mut args: Vec<&str> = vec!["--json"];
        args.extend(applied.iter().map(String::as_str));
        let v = json(&run(&args));
        assert_eq!(v["exit_code"], 0, "{hint}: {v}");
        assert!(socket_denials(&v, family).is_empty(), "{hint}: {v}");
    }
}
