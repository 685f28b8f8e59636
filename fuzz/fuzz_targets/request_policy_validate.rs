//! Fuzzes request parsing, policy parsing and `validate()`: none may panic, and a valid
//! plan must keep argv byte-identical to the request (arguments are never rewritten).
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tierbox_policy::{Policy, ProcessRunRequest, ValidateContext, validate};

fn workspace() -> &'static PathBuf {
    static WS: OnceLock<PathBuf> = OnceLock::new();
    WS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tierbox-fuzz-ws-{}", std::process::id()));
        let _ = std::fs::create_dir_all(dir.join("src"));
        let _ = std::fs::write(dir.join("src/main.rs"), "fn main() {}");
        let _ = std::os::unix::fs::symlink("/etc/passwd", dir.join("link-out"));
        let _ = std::os::unix::fs::symlink("/nonexistent/x", dir.join("dangling"));
        dir
    })
}

fn permissive() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| {
        let mut p = Policy::default();
        p.exec.allowed_executables = ["ls", "cat", "git", "env", "find", "xargs", "true", "bash", "python3"].map(String::from).to_vec();
        p.exec.allow_interpreters = true;
        p.egress.mode = tierbox_policy::EgressMode::Preflight;
        p.egress.allow = vec!["*.example.com".to_owned(), "example.org:443".to_owned()];
        p
    })
}

fuzz_target!(|data: &[u8]| {
    // Input: policy TOML, a NUL separator, then the request JSON. Without a separator the
    // whole input is a request against a fixed permissive policy.
    let (policy, request) = match data.iter().position(|b| *b == 0) {
        Some(i) => {
            let Ok(text) = std::str::from_utf8(&data[..i]) else { return };
            match Policy::from_toml(text) {
                Ok(p) => (p, &data[i + 1..]),
                Err(_) => return,
            }
        }
        None => (permissive().clone(), data),
    };
    let Ok(req) = ProcessRunRequest::from_json(request) else { return };
    let ctx = ValidateContext::new(workspace()).with_env(BTreeMap::from([("HOME".to_owned(), "/root".to_owned())]));
    if let Ok(plan) = validate(&policy, &req, &ctx) {
        assert_eq!(plan.argv[0], req.command);
        assert_eq!(&plan.argv[1..], &req.args[..]);
        assert!(plan.cwd.starts_with(&plan.workspace));
    } else if let Err(r) = validate(&policy, &req, &ctx) {
        assert!(!r.code().is_empty());
        let _ = r.to_string();
    }
});
