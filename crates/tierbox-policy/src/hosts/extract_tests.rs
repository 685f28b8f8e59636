#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// `(host, port, arg_index)` triples found by the generic pass.
fn generic(list: &[&str]) -> Vec<(String, Option<u16>, usize)> {
    extract_hosts(&args(list))
        .into_iter()
        .map(|f| (f.host, f.port, f.arg_index))
        .collect()
}

/// `(host, port, arg_index)` triples found for `program`.
fn for_program(program: &str, list: &[&str]) -> Vec<(String, Option<u16>, usize)> {
    extract_hosts_for(program, &args(list))
        .into_iter()
        .map(|f| (f.host, f.port, f.arg_index))
        .collect()
}

fn h(host: &str, port: Option<u16>, idx: usize) -> (String, Option<u16>, usize) {
    (host.to_owned(), port, idx)
}

#[test]
fn urls_with_an_authority() {
    let cases: &[(&str, &str, Option<u16>)] = &[
        ("https://Example.COM/x", "example.com", Some(443)),
        ("http://example.com:8080/x?y#z", "example.com", Some(8080)),
        ("git://h.example", "h.example", Some(9418)),
        ("git://h", "h", Some(9418)),
        ("ssh://user@h.example:22/x", "h.example", Some(22)),
        ("ssh://user@h.example:2222/x", "h.example", Some(2222)),
        ("git+ssh://git@h.example/r", "h.example", Some(22)),
        ("http://[::1]:8080/", "::1", Some(8080)),
        ("http://[fd00::1]/", "fd00::1", Some(80)),
        ("socks5h://proxy.example:1080", "proxy.example", Some(1080)),
        ("https://user:pw@example.com/", "example.com", Some(443)),
        (
            "https://bücher.example/",
            "xn--bcher-kva.example",
            Some(443),
        ),
        ("ssh://bücher.example/", "xn--bcher-kva.example", Some(22)),
        ("http://2130706433/", "127.0.0.1", Some(80)),
        ("'https://example.com/'", "example.com", Some(443)),
        ("weird://example.com/", "example.com", None),
    ];
    for (token, host, port) in cases {
        assert_eq!(generic(&[token]), [h(host, *port, 0)], "{token}");
    }
}

#[test]
fn url_parser_differentials_report_both_readings() {
    // The URL standard treats '\' as a path separator; RFC 3986 parsers do not.
    let found = generic(&["http://evil.example\\@good.example/"]);
    assert!(found.contains(&h("evil.example", Some(80), 0)), "{found:?}");
    assert!(found.contains(&h("good.example", Some(80), 0)), "{found:?}");
}

#[test]
fn url_hosts_that_are_not_valid_names_are_still_reported() {
    assert_eq!(
        generic(&["http://bad_name.example/"]),
        [h("bad_name.example", Some(80), 0)]
    );
    assert_eq!(generic(&["s3://my_bucket/key"]), [h("my_bucket", None, 0)]);
}

#[test]
fn file_urls_name_no_host() {
    assert!(generic(&["file:///etc/passwd", "file://localhost/x"]).is_empty());
}

#[test]
fn scp_like_and_user_at_host() {
    assert_eq!(
        generic(&["git@github.com:org/repo.git"]),
        [h("github.com", None, 0)]
    );
    assert_eq!(
        generic(&["user@blocked.test"]),
        [h("blocked.test", None, 0)]
    );
    assert_eq!(generic(&["root@10.0.0.1"]), [h("10.0.0.1", None, 0)]);
    assert_eq!(generic(&["me@[::1]:x"]), [h("::1", None, 0)]);
    assert_eq!(
        generic(&["deploy@localhost:/srv"]),
        [h("localhost", None, 0)]
    );
    let found = extract_hosts(&args(&["git@github.com:org/repo.git"]));
    assert_eq!(found[0].how, "user@host:path");
}

#[test]
fn host_port() {
    assert_eq!(
        generic(&["blocked.test:3128"]),
        [h("blocked.test", Some(3128), 0)]
    );
    assert_eq!(generic(&["10.0.0.1:22"]), [h("10.0.0.1", Some(22), 0)]);
    assert_eq!(
        generic(&["localhost:8080"]),
        [h("localhost", Some(8080), 0)]
    );
    assert_eq!(generic(&["[::1]:8080"]), [h("::1", Some(8080), 0)]);
    assert_eq!(
        generic(&["registry.example:5000/team/img:1.0"]),
        [h("registry.example", Some(5000), 0)]
    );
}

#[test]
fn ip_literals() {
    assert_eq!(generic(&["10.0.0.1"]), [h("10.0.0.1", None, 0)]);
    assert_eq!(generic(&["[fd00::1]"]), [h("fd00::1", None, 0)]);
    assert_eq!(
        generic(&["010.0.0.1"]),
        [h("8.0.0.1", None, 0)],
        "inet_aton reads a leading 0 as octal"
    );
    assert_eq!(generic(&["0x7f.0.0.1"]), [h("127.0.0.1", None, 0)]);
}

#[test]
fn things_that_are_not_hosts() {
    for token in [
        "a:b",
        "HEAD~1",
        "HEAD:src/main.rs",
        "12:30",
        "12:30:45",
        "C:\\x",
        "foo.txt",
        "notes.txt",
        "std::io",
        "key=value",
        "2024-01-01T10:00:00",
        "2024-01-01T10:00:00Z",
        "localhost:notaport",
        "example.com:0",
        "example.com:65536",
        "node:20",
        "ubuntu:22.04",
        "redis:6379",
        "pkg@1.2.3",
        "lodash@4.17.21",
        "@scope/pkg@1.0.0",
        "stash@{0}",
        "./a@b.example:c",
        "1.2.3",
        "v1.2.3",
        "8080",
        "--verbose",
        "-",
        "",
        "hello world",
        "see https://example.com for details",
        "a,b",
        "x=1:2",
        "fe80::1",
        "dead::beef",
    ] {
        assert!(
            generic(&[token]).is_empty(),
            "{token:?} gave {:?}",
            generic(&[token])
        );
    }
}

#[test]
fn email_addresses_in_email_contexts_are_not_ssh_destinations() {
    assert!(generic(&["config", "user.email", "me@example.com"]).is_empty());
    assert!(generic(&["--author=me@example.com"]).is_empty());
    assert!(generic(&["--author", "Me <me@example.com>"]).is_empty());
    assert_eq!(
        generic(&["config", "user.name", "me@example.com"]),
        [h("example.com", None, 2)]
    );
}

#[test]
fn host_hint_options() {
    assert_eq!(
        generic(&["--host", "db.example"]),
        [h("db.example", None, 1)]
    );
    assert_eq!(generic(&["--host=db.example"]), [h("db.example", None, 0)]);
    assert_eq!(
        generic(&["--proxy", "blocked.test:3128", "x"]),
        [h("blocked.test", Some(3128), 1)]
    );
    assert_eq!(
        generic(&["--index-url", "pypi.example/simple"]),
        [h("pypi.example", None, 1)]
    );
    assert_eq!(
        generic(&["--extra-index-url=https://pypi.example/simple"]),
        [h("pypi.example", Some(443), 0)]
    );
    assert_eq!(
        generic(&["--registry", "registry.example"]),
        [h("registry.example", None, 1)]
    );
    assert_eq!(generic(&["--server", "10.0.0.5"]), [h("10.0.0.5", None, 1)]);
    assert_eq!(generic(&["--endpoint", "::1"]), [h("::1", None, 1)]);
    assert_eq!(
        generic(&["--remote", "origin.example"]),
        [h("origin.example", None, 1)]
    );
    assert_eq!(
        generic(&["--hosts", "a.example,b.example"]),
        [h("a.example", None, 1), h("b.example", None, 1)]
    );
    assert_eq!(
        generic(&["-c", "http.proxy=proxy.example:3128"]),
        [h("proxy.example", Some(3128), 1)]
    );
    assert_eq!(
        generic(&["-o", "ProxyJump=bastion.example"]),
        [h("bastion.example", None, 1)]
    );
    assert_eq!(
        generic(&["-Dhttp.proxyHost=proxy.example"]),
        [h("proxy.example", None, 0)]
    );
    assert_eq!(
        generic(&["HTTPS_PROXY=http://proxy.example:8080"]),
        [h("proxy.example", Some(8080), 0)]
    );
    // A bare file-like name counts only as a hint value.
    assert_eq!(generic(&["--url", "notes.txt"]), [h("notes.txt", None, 1)]);
    assert!(generic(&["notes.txt"]).is_empty());
}

#[test]
fn what_is_not_a_host_hint() {
    // One-letter options are too overloaded (`curl -H` is a header).
    assert!(generic(&["-H", "api.example"]).is_empty());
    assert!(generic(&["-h", "api.example"]).is_empty());
    // Negated flags take no value.
    assert!(generic(&["--no-proxy", "notes.txt"]).is_empty());
    // Hint values must look like domains: `git submodule update --remote mymodule`.
    assert!(generic(&["--remote", "mymodule"]).is_empty());
    // The next option is not a value.
    assert!(generic(&["--host", "--verbose", "notes.txt"]).is_empty());
    assert!(generic(&["--ghost", "notes.txt"]).is_empty());
}

#[test]
fn key_segments_split_dashes_case_and_punctuation() {
    assert_eq!(key_segments("--index-url"), ["index", "url"]);
    assert_eq!(key_segments("ProxyJump"), ["proxy", "jump"]);
    assert_eq!(key_segments("DOCKER_HOST"), ["docker", "host"]);
    assert_eq!(key_segments("http.proxyHost"), ["http", "proxy", "host"]);
    assert!(is_hint_key("remote.origin.url"));
    assert!(is_hint_key("--registry"));
    assert!(!is_hint_key("--ghost"));
    assert!(!is_hint_option("-H"));
    assert!(is_hint_option("--proxy"));
    assert!(!is_hint_option("--no-proxy"));
}

#[test]
fn clients_positional_hosts() {
    assert_eq!(
        for_program("ping", &["blocked.test"]),
        [h("blocked.test", None, 0)]
    );
    assert_eq!(
        for_program("ping", &["-c", "3", "-I", "eth0", "blocked.test"]),
        [h("blocked.test", None, 4)]
    );
    assert_eq!(
        for_program("ping", &["-c3", "10.0.0.1"]),
        [h("10.0.0.1", None, 1)]
    );
    assert_eq!(for_program("ping6", &["fd00::1"]), [h("fd00::1", None, 0)]);
    assert_eq!(
        for_program("ssh", &["blocked.test"]),
        [h("blocked.test", None, 0)]
    );
    assert_eq!(
        for_program("ssh", &["db"]),
        [h("db", None, 0)],
        "ssh destinations may be single labels"
    );
    assert_eq!(
        for_program("ssh", &["-p", "2222", "user@blocked.test", "ls"]),
        [h("blocked.test", Some(2222), 2)]
    );
    assert_eq!(
        for_program("ssh", &["user@blocked.test", "-p2222"]),
        [h("blocked.test", Some(2222), 0)]
    );
    assert_eq!(
        for_program(
            "ssh",
            &[
                "-i",
                "id.key",
                "-l",
                "me",
                "host.example",
                "cat",
                "notes.txt"
            ]
        ),
        [h("host.example", None, 4)]
    );
    assert_eq!(
        for_program("ssh", &["-J", "jump.example:22", "target.example"]),
        [h("jump.example", Some(22), 1), h("target.example", None, 2)]
    );
    assert_eq!(
        for_program("sftp", &["-P", "2200", "files.example:/srv"]),
        [h("files.example", Some(2200), 2)]
    );
    assert_eq!(
        for_program("scp", &["notes.txt", "db:/tmp/"]),
        [h("db", None, 1)]
    );
    assert_eq!(
        for_program("scp", &["host.example:/etc/x", "./local"]),
        [h("host.example", None, 0)]
    );
    assert_eq!(
        for_program("rsync", &["-av", "src/", "mirror.example::module/"]),
        [h("mirror.example", None, 2)]
    );
    assert_eq!(
        for_program(
            "rsync",
            &["-e", "ssh -p 22", "--exclude", "a:b", "x", "backup:/d"]
        ),
        [h("backup", None, 5)]
    );
    assert_eq!(
        for_program("nc", &["blocked.test", "80"]),
        [h("blocked.test", Some(80), 0)]
    );
    assert_eq!(
        for_program("nc", &["-x", "proxy.example:1080", "db", "5432"]),
        [h("proxy.example", Some(1080), 1), h("db", Some(5432), 2)]
    );
    assert!(for_program("nc", &["-l", "8080"]).is_empty());
    assert_eq!(
        for_program("telnet", &["mud.example", "4000"]),
        [h("mud.example", Some(4000), 0)]
    );
    assert_eq!(
        for_program("dig", &["@9.9.9.9", "example.com", "MX", "+short"]),
        [h("9.9.9.9", None, 0), h("example.com", None, 1)]
    );
    assert_eq!(
        for_program("nslookup", &["example.com", "ns.example"]),
        [h("example.com", None, 0), h("ns.example", None, 1)]
    );
    assert_eq!(
        for_program("host", &["-t", "mx", "example.com"]),
        [h("example.com", None, 2)]
    );
    assert_eq!(
        for_program("whois", &["-h", "whois.example", "example.com"]),
        [h("whois.example", None, 1), h("example.com", None, 2)]
    );
    assert_eq!(
        for_program("ftp", &["ftp.example"]),
        [h("ftp.example", None, 0)]
    );
}

#[test]
fn curl_and_wget_take_schemeless_urls_but_not_option_values() {
    assert_eq!(
        for_program("curl", &["example.com/x"]),
        [h("example.com", None, 0)]
    );
    assert_eq!(
        for_program("curl", &["-o", "out.txt", "example.com:8080/x"]),
        [h("example.com", Some(8080), 2)]
    );
    assert_eq!(
        for_program(
            "curl",
            &[
                "--output",
                "out.txt",
                "-H",
                "x-a: b.example",
                "https://api.example/"
            ]
        ),
        [h("api.example", Some(443), 4)]
    );
    assert_eq!(
        for_program("curl", &["--proxy", "blocked.test:3128", "x"]),
        [h("blocked.test", Some(3128), 1)]
    );
    assert_eq!(
        for_program("curl", &["-x", "proxy.example", "x"]),
        [h("proxy.example", None, 1)]
    );
    assert_eq!(
        for_program("curl", &["-sSfLo", "out.txt", "api.example"]),
        [h("api.example", None, 2)]
    );
    let found = for_program(
        "curl",
        &[
            "--connect-to",
            "a.example:443:b.example:443",
            "https://a.example/",
        ],
    );
    assert!(found.contains(&h("b.example", None, 1)), "{found:?}");
    assert!(found.contains(&h("a.example", Some(443), 2)), "{found:?}");
    let found = for_program(
        "curl",
        &["--resolve", "a.example:443:10.0.0.9", "https://a.example/"],
    );
    assert!(found.contains(&h("10.0.0.9", None, 1)), "{found:?}");
    assert_eq!(
        for_program("wget", &["-O", "page.html", "example.com"]),
        [h("example.com", None, 2)]
    );
    assert_eq!(
        for_program(
            "wget",
            &["-e", "https_proxy=proxy.example:8080", "example.com"]
        ),
        [h("proxy.example", Some(8080), 1), h("example.com", None, 2)]
    );
}

#[test]
fn git_scp_remotes_without_a_user() {
    assert_eq!(
        for_program("git", &["clone", "host.example:org/r.git"]),
        [h("host.example", None, 1)]
    );
    assert!(for_program("git", &["push", "origin", "main:main"]).is_empty());
    assert!(for_program("git", &["show", "HEAD:src/main.rs"]).is_empty());
    assert!(for_program("git", &["log", "HEAD~1"]).is_empty());
    assert!(for_program("git", &["-C", "sub.dir", "status"]).is_empty());
}

#[test]
fn wrappers_are_seen_through() {
    assert_eq!(
        for_program("timeout", &["5", "ping", "blocked.test"]),
        [h("blocked.test", None, 2)]
    );
    assert_eq!(
        for_program("/usr/bin/env", &["A=b", "ssh", "db"]),
        [h("db", None, 2)]
    );
    assert_eq!(
        for_program("sudo", &["-u", "me", "curl", "-o", "x.txt", "api.example"]),
        [h("api.example", None, 5)]
    );
}

#[test]
fn program_names_are_base_names() {
    assert_eq!(
        for_program("/usr/bin/ping", &["blocked.test"]),
        [h("blocked.test", None, 0)]
    );
    assert_eq!(
        for_program("PING.EXE", &["blocked.test"]),
        vec![],
        "names are case-sensitive"
    );
    assert_eq!(
        for_program("ping.exe", &["blocked.test"]),
        [h("blocked.test", None, 0)]
    );
    assert_eq!(base_name("C:\\tools\\curl.exe"), "curl");
}

#[test]
fn the_published_client_list_matches_the_option_tables() {
    let mut tabled: Vec<&str> = CLIENTS
        .iter()
        .flat_map(|c| c.names.iter().copied())
        .collect();
    let mut published = NETWORK_CLIENTS.to_vec();
    tabled.sort_unstable();
    published.sort_unstable();
    assert_eq!(tabled, published);
}

#[test]
fn non_clients_do_not_report_bare_domains() {
    for program in ["cat", "echo", "printf", "grep", "ls"] {
        assert!(
            for_program(program, &["notes.txt", "example.com"]).is_empty(),
            "{program}"
        );
    }
}

#[test]
fn each_host_is_reported_once_per_argument() {
    let found = extract_hosts_for("ssh", &args(&["-p", "22", "user@blocked.test"]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].port, Some(22));
}

mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::hosts::HostPattern;

    /// Tokens built from the characters host syntax is made of, so the generator
    /// reaches the interesting branches.
    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9.:@/\\[\\]\\-_=,%~ ]{0,40}",
            "(https?|ssh|git|file)://[a-z0-9.:@\\[\\]\\\\_%-]{0,30}(/[a-z]{0,5})?",
            "[a-z0-9_-]{0,8}@?[a-z0-9.-]{0,20}(:[0-9a-z/]{0,8})?",
            any::<String>(),
        ]
    }

    proptest! {
        #[test]
        fn extraction_never_panics_and_reports_canonical_hosts(
            program in prop_oneof![Just("ssh"), Just("curl"), Just("scp"), Just("ping"), Just("nc"), Just("git"), Just("timeout"), Just("cat")],
            tokens in proptest::collection::vec(token(), 0..8),
        ) {
            for found in extract_hosts_for(program, &tokens) {
                prop_assert!(found.arg_index < tokens.len());
                if found.how != HOW_URL {
                    // Outside URLs only valid hosts are reported, already canonical.
                    let canon = CanonicalHost::parse(&found.host).map(|h| h.to_string());
                    prop_assert_eq!(canon.as_deref(), Ok(found.host.as_str()), "{:?}", found);
                }
            }
        }

        #[test]
        fn patterns_never_panic_and_round_trip(raw in token()) {
            if let Ok(p) = HostPattern::parse(&raw) {
                prop_assert_eq!(HostPattern::parse(&p.to_string()), Ok(p));
            }
        }
    }
}
