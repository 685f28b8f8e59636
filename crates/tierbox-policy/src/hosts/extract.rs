//! Finding the hosts a command line names.
//!
//! Two passes over `args`:
//!
//! 1. **Generic** ([`extract_hosts`]), for any program. Only forms that are hosts by
//!    their shape count, so file names and code never do: URLs with an authority,
//!    `user@host[:path]`, `host:port` (port all digits, 1–65535), dotted-quad IPv4 and
//!    bracketed IPv6 literals. The value of a *host-hint* option (`--host h`,
//!    `--proxy=h`, `http.proxy=h`, `-o ProxyJump=h`) may also be a bare domain name.
//! 2. **Network client** ([`extract_hosts_for`]), for programs whose positional
//!    arguments are hosts ([`NETWORK_CLIENTS`]; also when run through a wrapper such
//!    as `timeout` or `sudo`): `ssh host`, `ping host`, `scp f host:dir`,
//!    `curl example.com/x`. A small table per program says which options take a value,
//!    so `curl -o out.txt …` does not report `out.txt`.
//!
//! A bare domain and a file name look alike (`notes.txt`), which is why bare domains
//! count only in the hint and client contexts. Known misses, by design: single-label
//! names outside those contexts (`redis:6379` is also how `image:tag` looks), IPv4
//! shorthand (`127.1`) outside URLs, hosts in free text, files, stdin or the
//! environment, and option tables that do not list a program's every option. Known
//! false positives: `file.rs:42` has the shape of `host:port`, and any domain-looking
//! word after a host-hint option (`--url notes.txt`) is taken as a host.

use std::net::Ipv4Addr;

use super::{CanonicalHost, parse_port};

/// A host found in a request's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FoundHost {
    /// The host in canonical form ([`super::canonical_host`]). For a URL whose authority
    /// is not a valid host name (`http://bad_name/`), the authority's host text in
    /// lowercase: it matches no pattern, so a preflight denies it rather than miss it.
    pub host: String,
    /// The port, when the argument gives one or its URL scheme implies one
    /// (`https` → 443, `ssh` → 22); `None` when unknown.
    pub port: Option<u16>,
    /// Index into `args` (0 is the first argument after the program).
    pub arg_index: usize,
    /// Which rule found it: `"url"`, `"user@host"`, `"user@host:path"`, `"host:port"`,
    /// `"ip literal"`, `"host option"` or `"network client argument"`.
    pub how: &'static str,
}

const HOW_URL: &str = "url";
const HOW_USER_AT_HOST: &str = "user@host";
const HOW_SCP: &str = "user@host:path";
const HOW_HOST_PORT: &str = "host:port";
const HOW_IP: &str = "ip literal";
const HOW_HINT: &str = "host option";
const HOW_CLIENT: &str = "network client argument";

/// Name segments that mark an option or key as naming a host: `--host`, `--proxy`,
/// `--index-url`, `--registry`, `http.proxy`, `ProxyJump`, `DOCKER_HOST`. A key is
/// lowercased after splitting camelCase, stripped of leading dashes, and split on
/// non-alphanumerics; any segment (or the segment without a plural `s`) in this list
/// makes it a hint.
pub const HOST_HINT_SEGMENTS: &[&str] = &[
    "host", "hostname", "server", "endpoint", "url", "uri", "domain", "proxy", "address", "addr",
    "remote", "registry",
];

/// Segments that mark a key whose value is an e-mail address (`user.email`, `--author`):
/// `name@example.com` there is not an ssh destination.
const EMAIL_SEGMENTS: &[&str] = &["email", "mail", "author", "committer"];

/// Programs whose positional arguments name hosts; [`extract_hosts_for`] knows their
/// options. `git` is here only for its scp-like `host.example:org/repo` remotes.
pub const NETWORK_CLIENTS: &[&str] = &[
    "ssh", "scp", "sftp", "rsync", "ping", "ping6", "nc", "netcat", "ncat", "telnet", "dig",
    "nslookup", "host", "whois", "curl", "wget", "ftp", "git",
];

/// Programs that run the program named in their arguments; the client pass looks
/// through them (`timeout 5 ssh host`, `sudo -u x curl example.com`).
const WRAPPERS: &[&str] = &[
    "env",
    "nice",
    "nohup",
    "timeout",
    "stdbuf",
    "setsid",
    "time",
    "xargs",
    "sudo",
    "doas",
    "chroot",
    "strace",
    "flock",
    "ionice",
    "taskset",
    "torsocks",
    "proxychains",
    "proxychains4",
    "unbuffer",
    "watch",
    "command",
];

/// Finds hosts in `args` by their shape alone, for any program.
///
/// ```
/// use tierbox_policy::hosts::extract_hosts;
///
/// let args: Vec<String> = ["clone", "https://Example.COM/x", "git@github.com:org/r.git", "notes.txt", "HEAD~1"]
///     .map(String::from)
///     .to_vec();
/// let found = extract_hosts(&args);
/// let hosts: Vec<(&str, Option<u16>, usize)> =
///     found.iter().map(|f| (f.host.as_str(), f.port, f.arg_index)).collect();
/// assert_eq!(hosts, [("example.com", Some(443), 1), ("github.com", None, 2)]);
/// ```
pub fn extract_hosts(args: &[String]) -> Vec<FoundHost> {
    let mut out = Found::default();
    generic_pass(args, &mut out);
    out.finish()
}

/// [`extract_hosts`], plus the positional hosts of network clients such as `ssh`,
/// `ping` and `curl` ([`NETWORK_CLIENTS`]), also when `program` is a wrapper such as
/// `timeout` or `sudo` that runs one. `program` may be a path; its base name counts.
///
/// ```
/// use tierbox_policy::hosts::extract_hosts_for;
///
/// let args: Vec<String> = ["-c", "3", "example.com"].map(String::from).to_vec();
/// assert_eq!(extract_hosts_for("ping", &args)[0].host, "example.com");
/// assert!(extract_hosts_for("cat", &args).is_empty());
/// ```
pub fn extract_hosts_for(program: &str, args: &[String]) -> Vec<FoundHost> {
    let mut out = Found::default();
    generic_pass(args, &mut out);
    let base = base_name(program);
    if let Some(client) = client_named(base) {
        client_pass(client, args, 0, &mut out);
    } else if WRAPPERS.contains(&base) {
        let wrapped = args
            .iter()
            .enumerate()
            .find_map(|(i, a)| client_named(base_name(a)).map(|c| (i, c)));
        if let Some((i, client)) = wrapped {
            client_pass(
                client,
                args.get(i + 1..).unwrap_or_default(),
                i + 1,
                &mut out,
            );
        }
    }
    out.finish()
}

fn base_name(program: &str) -> &str {
    let base = program.rsplit(['/', '\\']).next().unwrap_or(program);
    match base.len().checked_sub(4) {
        Some(cut)
            if base
                .get(cut..)
                .is_some_and(|ext| ext.eq_ignore_ascii_case(".exe")) =>
        {
            base.get(..cut).unwrap_or(base)
        }
        _ => base,
    }
}

// ---- collecting ------------------------------------------------------------------------

#[derive(Default)]
struct Found(Vec<FoundHost>);

impl Found {
    fn push(&mut self, arg_index: usize, host: String, port: Option<u16>, how: &'static str) {
        let same = |f: &&mut FoundHost| f.arg_index == arg_index && f.host == host;
        if let Some(known) = self
            .0
            .iter_mut()
            .find(|f| same(f) && (f.port == port || f.port.is_none() || port.is_none()))
        {
            // One host per argument: a port learnt later (ssh -p) refines an unknown one.
            if known.port.is_none() {
                known.port = port;
            }
            return;
        }
        self.0.push(FoundHost {
            host,
            port,
            arg_index,
            how,
        });
    }

    fn push_all(&mut self, arg_index: usize, hits: Vec<Hit>) {
        for hit in hits {
            self.push(arg_index, hit.host, hit.port, hit.how);
        }
    }

    fn finish(mut self) -> Vec<FoundHost> {
        self.0.sort_by_key(|f| f.arg_index);
        self.0
    }
}

struct Hit {
    host: String,
    port: Option<u16>,
    how: &'static str,
}

impl Hit {
    fn new(host: &CanonicalHost, port: Option<u16>, how: &'static str) -> Self {
        Self {
            host: host.to_string(),
            port,
            how,
        }
    }
}

/// How much of a token may be a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Only forms that are hosts by shape.
    Generic,
    /// Like `Generic`, but `name@domain` is an e-mail address.
    Email,
    /// The value of a host-hint option: bare domains, `host/path`, comma lists too.
    Hint,
}

// ---- pass 1: generic -------------------------------------------------------------------

fn generic_pass(args: &[String], out: &mut Found) {
    let mut next_ctx = Ctx::Generic;
    for (i, arg) in args.iter().enumerate() {
        let ctx = std::mem::replace(&mut next_ctx, Ctx::Generic);
        if arg.starts_with('-') && arg.len() > 1 {
            match arg.split_once('=') {
                Some((key, value)) => out.push_all(i, scan(value, key_ctx(key))),
                None if is_hint_option(arg) => next_ctx = Ctx::Hint,
                None if is_email_key(arg) => next_ctx = Ctx::Email,
                None => {}
            }
            continue;
        }
        if ctx == Ctx::Generic && url_scheme(trim_token(arg)).is_none() {
            if let Some((key, value)) = assignment(arg) {
                out.push_all(i, scan(value, key_ctx(key)));
                continue;
            }
            if is_email_key(arg) {
                // `git config user.email a@b.example`
                next_ctx = Ctx::Email;
            }
        }
        out.push_all(i, scan(arg, ctx));
    }
}

/// `key=value` where the key looks like a variable or config name (`http.proxy`,
/// `HTTPS_PROXY`, `ProxyJump`), not like a URL or a path.
fn assignment(arg: &str) -> Option<(&str, &str)> {
    let (key, value) = arg.split_once('=')?;
    let key_like = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
    key_like.then_some((key, value))
}

fn key_ctx(key: &str) -> Ctx {
    if is_hint_key(key) {
        Ctx::Hint
    } else if is_email_key(key) {
        Ctx::Email
    } else {
        Ctx::Generic
    }
}

/// Lowercase segments of an option or key name: dashes stripped, camelCase split, then
/// split on anything not alphanumeric.
fn key_segments(key: &str) -> Vec<String> {
    let key = key.trim_start_matches('-');
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_ascii_alphanumeric() {
            segments.push(std::mem::take(&mut current));
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            segments.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    segments.push(current);
    segments.retain(|s| !s.is_empty());
    segments
}

fn segments_match(key: &str, list: &[&str]) -> bool {
    key_segments(key).iter().any(|s| {
        let singular = s.strip_suffix('s').filter(|t| t.len() >= 3);
        list.contains(&s.as_str()) || singular.is_some_and(|t| list.contains(&t))
    })
}

fn is_hint_key(key: &str) -> bool {
    segments_match(key, HOST_HINT_SEGMENTS)
}

fn is_email_key(key: &str) -> bool {
    segments_match(key, EMAIL_SEGMENTS)
}

/// A long option (`--proxy`, `-proxy`; never a one-letter `-h`) that names a host and
/// takes its value from the next argument. Negated flags (`--no-proxy`) take none.
fn is_hint_option(arg: &str) -> bool {
    let name = arg.trim_start_matches('-');
    if name.len() < 2 || !name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic()) {
        return false;
    }
    let segments = key_segments(name);
    if segments.first().is_some_and(|s| s == "no") {
        return false;
    }
    is_hint_key(name)
}

// ---- token forms -----------------------------------------------------------------------

/// Strips quotes and brackets an agent may leave around a token (`'https://x/'`, `<url>`).
fn trim_token(token: &str) -> &str {
    token.trim_matches(|c: char| matches!(c, '"' | '\'' | '<' | '>' | '`') || c.is_whitespace())
}

/// The hosts a single token names in `ctx`. A hint value is also read as a list
/// split on commas and whitespace (`--hosts a,b`, `-o "ProxyCommand=nc evil.example 22"`).
fn scan(token: &str, ctx: Ctx) -> Vec<Hit> {
    let token = trim_token(token);
    if ctx == Ctx::Hint {
        return token
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter_map(|part| scan_one(trim_token(part), ctx))
            .flatten()
            .collect();
    }
    scan_one(token, ctx).unwrap_or_default()
}

fn scan_one(token: &str, ctx: Ctx) -> Option<Vec<Hit>> {
    if token.is_empty() {
        return None;
    }
    if let Some(scheme) = url_scheme(token) {
        return Some(url_hosts(token, scheme));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    if let Some(hit) = bracketed_ipv6(token) {
        return Some(vec![hit]);
    }
    if let Some(hit) = user_at_host(token, ctx == Ctx::Email, Names::DomainsOnly) {
        return Some(vec![hit]);
    }
    if let Some((host, port)) = host_port_prefix(token, Names::DomainsOnly) {
        return Some(vec![Hit::new(&host, Some(port), HOW_HOST_PORT)]);
    }
    if let Some(ip) = ipv4_literal(token) {
        return Some(vec![Hit::new(&ip, None, HOW_IP)]);
    }
    if ctx == Ctx::Hint {
        return schemeless(token, Names::DomainsOnly)
            .map(|(host, port)| vec![Hit::new(&host, port, HOW_HINT)]);
    }
    None
}

/// Which bare names count as hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    /// Names with a dot and an alphabetic last label (`example.com`), and `localhost`.
    DomainsOnly,
    /// Also single-label names with a letter (`db`), where the syntax says "host".
    AnyName,
}

/// `text` as a host if it looks like one: an IP literal (dotted-quad IPv4, or IPv6 in
/// brackets), `localhost`, or a name per `names`. Numbers such as `12` or `1.2.3`, which
/// the URL host parser would read as IPv4, are not hosts here.
fn host_like(text: &str, names: Names) -> Option<CanonicalHost> {
    if text.starts_with('[') {
        return CanonicalHost::parse(text).ok();
    }
    if let Some(ip) = ipv4_literal(text) {
        return Some(ip);
    }
    match CanonicalHost::parse(text).ok()? {
        CanonicalHost::Ip(_) => None,
        CanonicalHost::Name(name) => {
            let ok = name == "localhost"
                || domain_looking(&name)
                || (names == Names::AnyName && name.bytes().any(|b| b.is_ascii_alphabetic()));
            ok.then_some(CanonicalHost::Name(name))
        }
    }
}

/// At least two labels, the last alphabetic with 2+ letters or an IDNA label (`xn--…`).
fn domain_looking(name: &str) -> bool {
    match name.rsplit_once('.') {
        Some((_, tld)) => {
            (tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic()))
                || tld.starts_with("xn--")
        }
        None => false,
    }
}

/// Four dot-separated numbers (decimal, or `0x` hex as inet_aton reads them).
fn ipv4_literal(text: &str) -> Option<CanonicalHost> {
    let parts: Vec<&str> = text.split('.').collect();
    let numeric = |p: &&str| {
        let digits = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X"));
        match digits {
            Some(hex) => !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            None => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()),
        }
    };
    if parts.len() != 4 || !parts.iter().all(numeric) {
        return None;
    }
    if let Ok(v4) = text.parse::<Ipv4Addr>() {
        return Some(CanonicalHost::Ip(v4.into()));
    }
    // Leading zeros or hex: let the URL standard's parser decide what a client would
    // connect to (`010.0.0.1` is 8.0.0.1 to inet_aton).
    CanonicalHost::parse(text).ok().filter(|h| h.ip().is_some())
}

/// `[v6]`, `[v6]:port`.
fn bracketed_ipv6(token: &str) -> Option<Hit> {
    if !token.starts_with('[') {
        return None;
    }
    let close = token.find(']')?;
    let (addr, rest) = token.split_at(close + 1);
    let host = CanonicalHost::parse(addr).ok()?;
    match rest.strip_prefix(':') {
        None if rest.is_empty() => Some(Hit::new(&host, None, HOW_IP)),
        Some(port) => Some(Hit::new(&host, Some(parse_port(port)?), HOW_IP)),
        None => None,
    }
}

/// Splits `dest[:rest]` at the first `:` outside brackets.
fn split_remote(token: &str) -> (&str, Option<&str>) {
    let mut depth = 0u32;
    for (i, c) in token.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ':' if depth == 0 => return (&token[..i], Some(&token[i + 1..])),
            _ => {}
        }
    }
    (token, None)
}

/// `user@host` (ssh) and `user@host:path` (scp, git). The user part has no `/`, so
/// `./a@b:c` is a path; the host must look like a host, so `pkg@1.2.3` and
/// `stash@{0}` are not.
fn user_at_host(token: &str, email: bool, names: Names) -> Option<Hit> {
    let (dest, rest) = split_remote(token);
    let (user, host) = dest.rsplit_once('@')?;
    if user.is_empty() || user.contains(['/', '\\']) {
        return None;
    }
    if email && rest.is_none() {
        return None;
    }
    let host = host_like(host, names)?;
    Some(Hit::new(
        &host,
        None,
        if rest.is_some() {
            HOW_SCP
        } else {
            HOW_USER_AT_HOST
        },
    ))
}

/// `host:port` or `host:port/path` (a registry reference such as
/// `registry.example:5000/img`), with the port all digits in 1–65535.
fn host_port_prefix(token: &str, names: Names) -> Option<(CanonicalHost, u16)> {
    let head = token.split('/').next().unwrap_or(token);
    let (host, port) = head.rsplit_once(':')?;
    let port = parse_port(port)?;
    if host.contains([':', '@']) && !host.starts_with('[') {
        return None;
    }
    Some((host_like(host, names)?, port))
}

/// A URL without a scheme, as curl and wget read one, or a hint value:
/// `host`, `host:port`, `host/path`, `[v6]:port/path`, a bare IPv6 literal.
fn schemeless(token: &str, names: Names) -> Option<(CanonicalHost, Option<u16>)> {
    if let Some(CanonicalHost::Ip(ip)) = token
        .contains("::")
        .then(|| CanonicalHost::parse(token).ok())
        .flatten()
    {
        return Some((CanonicalHost::Ip(ip), None));
    }
    let head = token.split(['/', '?', '#']).next().unwrap_or(token);
    let head = head.rsplit_once('@').map_or(head, |(_, h)| h);
    let (host, port) = match split_remote(head) {
        (host, None) => (host, None),
        (host, Some(port)) => (host, Some(parse_port(port)?)),
    };
    Some((host_like(host, names)?, port))
}

/// The scheme of `scheme://…`, lowercased, when the token is a URL with an authority.
fn url_scheme(token: &str) -> Option<String> {
    let (scheme, _) = token.split_once("://")?;
    let mut bytes = scheme.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic());
    let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    (first_ok && rest_ok).then(|| scheme.to_ascii_lowercase())
}

/// The port a URL scheme implies (the last `+` part of `git+ssh` counts).
fn scheme_default_port(scheme: &str) -> Option<u16> {
    let scheme = scheme.rsplit('+').next().unwrap_or(scheme);
    Some(match scheme {
        "http" | "ws" => 80,
        "https" | "wss" => 443,
        "ftp" => 21,
        "ftps" => 990,
        "ssh" | "sftp" | "scp" => 22,
        "git" => 9418,
        "rsync" => 873,
        "telnet" => 23,
        "socks" | "socks4" | "socks4a" | "socks5" | "socks5h" => 1080,
        "ldap" => 389,
        "ldaps" => 636,
        "smtp" => 25,
        "imap" => 143,
        "imaps" => 993,
        "redis" => 6379,
        "postgres" | "postgresql" => 5432,
        "mysql" => 3306,
        "mongodb" => 27017,
        "amqp" => 5672,
        _ => return None,
    })
}

/// The host(s) of a URL. URL parsers disagree on odd input (`http://a\@b/` is host `a`
/// to the URL standard and `b` to an RFC 3986 parser), so both readings are reported
/// and a preflight must allow both. `file:` URLs name no network host.
fn url_hosts(token: &str, scheme: String) -> Vec<Hit> {
    let mut hits: Vec<Hit> = Vec::new();
    if scheme == "file" {
        return hits;
    }
    let default_port = scheme_default_port(&scheme);
    let mut add = |raw: &str, port: Option<u16>| {
        if raw.is_empty() || raw == "[]" {
            return;
        }
        let host = CanonicalHost::parse(raw)
            .map(|h| h.to_string())
            .unwrap_or_else(|_| {
                raw.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_lowercase()
            });
        let port = port.or(default_port);
        if !hits.iter().any(|h| h.host == host && h.port == port) {
            hits.push(Hit {
                host,
                port,
                how: HOW_URL,
            });
        }
    };
    // The URL standard, as browsers and most libraries read it.
    if let Ok(url) = url::Url::parse(token)
        && let Some(host) = url.host()
    {
        let raw = match host {
            url::Host::Domain(name) => name.to_owned(),
            url::Host::Ipv4(v4) => v4.to_string(),
            url::Host::Ipv6(v6) => format!("[{v6}]"),
        };
        add(&raw, url.port());
    }
    // RFC 3986: the authority ends at the first '/', '?' or '#'; userinfo ends at the
    // last '@'.
    let after = token.split_once("://").map_or("", |(_, rest)| rest);
    let authority = after.split(['/', '?', '#']).next().unwrap_or(after);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.rfind(':') {
        Some(colon) if !host_port[colon..].contains(']') => {
            let port_text = &host_port[colon + 1..];
            (&host_port[..colon], parse_port(port_text))
        }
        _ => (host_port, None),
    };
    add(host, port);
    hits
}

// ---- pass 2: network clients -----------------------------------------------------------

/// What a client's positional arguments are.
#[derive(Debug, Clone, Copy)]
enum Positional {
    /// The first positional is the destination, `[user@]host[:path]`; the rest is a
    /// remote command (ssh) or, with `port_follows`, the second is a port (nc, telnet).
    Destination { port_follows: bool },
    /// Every positional `[user@]host:path` (or rsync's `host::module`) is remote; others
    /// are local paths. With `Names::DomainsOnly` (git), `main:main` is a refspec.
    Remote(Names),
    /// Every positional that is a domain or IP literal (ping, dig `@server`, whois).
    Domains,
    /// Every positional is a URL, perhaps without a scheme (curl, wget).
    Urls,
}

/// Option knowledge for one network client. Best effort: an option missing from
/// `short_values`/`long_values` makes its value look positional (a possible false
/// positive, never a miss).
struct Client {
    names: &'static [&'static str],
    /// Short options that take a value (attached, or the next argument).
    short_values: &'static str,
    /// Long options (without `--`) that take a value when not written `--opt=value`.
    long_values: &'static [&'static str],
    /// Short options whose value is a host (or a comma list of them).
    short_hosts: &'static str,
    /// Long options whose value is a host, `host:port`, or a `:`/`,` list with hosts
    /// (`--connect-to a:443:b:443`, `--resolve a:443:10.0.0.1`).
    long_hosts: &'static [&'static str],
    /// The short option that sets the destination port.
    port_option: Option<char>,
    positional: Positional,
}

const CLIENTS: &[Client] = &[
    Client {
        names: &["ssh"],
        short_values: "BbcDEeFIiLlmOoPQRSw",
        long_values: &[],
        short_hosts: "JW",
        long_hosts: &[],
        port_option: Some('p'),
        positional: Positional::Destination {
            port_follows: false,
        },
    },
    Client {
        names: &["sftp"],
        short_values: "BbcDFiloRSs",
        long_values: &[],
        short_hosts: "J",
        long_hosts: &[],
        port_option: Some('P'),
        positional: Positional::Destination {
            port_follows: false,
        },
    },
    Client {
        names: &["scp"],
        short_values: "cDFiloSX",
        long_values: &[],
        short_hosts: "J",
        long_hosts: &[],
        port_option: Some('P'),
        positional: Positional::Remote(Names::AnyName),
    },
    Client {
        names: &["rsync"],
        short_values: "eBfTM",
        long_values: &[
            "rsh",
            "rsync-path",
            "port",
            "password-file",
            "exclude",
            "include",
            "filter",
            "files-from",
            "exclude-from",
            "include-from",
            "log-file",
            "temp-dir",
            "backup-dir",
            "suffix",
            "chmod",
            "chown",
            "timeout",
            "contimeout",
            "bwlimit",
            "compare-dest",
            "copy-dest",
            "link-dest",
            "partial-dir",
            "out-format",
            "log-file-format",
            "max-size",
            "min-size",
            "block-size",
            "sockopts",
            "address",
            "remote-option",
            "usermap",
            "groupmap",
        ],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Remote(Names::AnyName),
    },
    Client {
        names: &["git"],
        short_values: "Cc",
        long_values: &[
            "git-dir",
            "work-tree",
            "namespace",
            "config-env",
            "exec-path",
        ],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Remote(Names::DomainsOnly),
    },
    Client {
        names: &["ping", "ping6"],
        short_values: "cFiIlmMpQsStTwW",
        long_values: &[],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Domains,
    },
    Client {
        // OpenBSD netcat.
        names: &["nc", "netcat"],
        short_values: "IiMmOPpsTVwX",
        long_values: &[],
        short_hosts: "x",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Destination { port_follows: true },
    },
    Client {
        names: &["ncat"],
        short_values: "cdeGimopswx",
        long_values: &[
            "exec",
            "sh-exec",
            "lua-exec",
            "output",
            "hex-dump",
            "source",
            "source-port",
            "wait",
            "idle-timeout",
            "delay",
            "max-conns",
            "allow",
            "allowfile",
            "deny",
            "denyfile",
            "proxy-type",
            "proxy-auth",
            "proxy-dns",
            "ssl-cert",
            "ssl-key",
            "ssl-trustfile",
            "ssl-ciphers",
            "ssl-servername",
            "ssl-alpn",
        ],
        short_hosts: "g",
        long_hosts: &["proxy"],
        port_option: None,
        positional: Positional::Destination { port_follows: true },
    },
    Client {
        names: &["telnet"],
        short_values: "beklnX",
        long_values: &[],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Destination { port_follows: true },
    },
    Client {
        names: &["ftp"],
        short_values: "aoPqrstT",
        long_values: &[],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Destination { port_follows: true },
    },
    Client {
        names: &["dig"],
        short_values: "bcfkpqtxy",
        long_values: &[],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Domains,
    },
    Client {
        names: &["nslookup"],
        short_values: "",
        long_values: &[],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Domains,
    },
    Client {
        names: &["host"],
        short_values: "cmNpRtW",
        long_values: &[],
        short_hosts: "",
        long_hosts: &[],
        port_option: None,
        positional: Positional::Domains,
    },
    Client {
        names: &["whois"],
        short_values: "gIipqsT",
        long_values: &["port"],
        short_hosts: "h",
        long_hosts: &["host"],
        port_option: None,
        positional: Positional::Domains,
    },
    Client {
        names: &["curl"],
        short_values: "AbcCdDeEFHKmoPQrTtuUwXYyz",
        long_values: &[
            "output",
            "data",
            "data-ascii",
            "data-binary",
            "data-raw",
            "data-urlencode",
            "json",
            "header",
            "proxy-header",
            "user-agent",
            "max-time",
            "connect-timeout",
            "cacert",
            "capath",
            "cert",
            "key",
            "config",
            "cookie",
            "cookie-jar",
            "referer",
            "request",
            "upload-file",
            "user",
            "proxy-user",
            "write-out",
            "form",
            "form-string",
            "retry",
            "retry-delay",
            "retry-max-time",
            "limit-rate",
            "interface",
            "dns-interface",
            "dns-ipv4-addr",
            "dns-ipv6-addr",
            "output-dir",
            "range",
            "continue-at",
            "speed-limit",
            "speed-time",
            "time-cond",
            "trace",
            "trace-ascii",
            "stderr",
            "dump-header",
            "max-filesize",
            "max-redirs",
            "local-port",
            "oauth2-bearer",
            "aws-sigv4",
            "variable",
            "expand-url",
            "hostpubmd5",
            "hostpubsha256",
            "pinnedpubkey",
            "ciphers",
            "tls-max",
            "unix-socket",
            "abstract-unix-socket",
            "netrc-file",
        ],
        short_hosts: "x",
        long_hosts: &[
            "proxy",
            "preproxy",
            "url",
            "connect-to",
            "resolve",
            "doh-url",
            "socks4",
            "socks4a",
            "socks5",
            "socks5-hostname",
            "dns-servers",
        ],
        port_option: None,
        positional: Positional::Urls,
    },
    Client {
        names: &["wget"],
        short_values: "aABDeiIlOoPQRtTUwX",
        long_values: &[
            "output-document",
            "output-file",
            "append-output",
            "execute",
            "input-file",
            "base",
            "tries",
            "timeout",
            "wait",
            "user-agent",
            "header",
            "directory-prefix",
            "quota",
            "level",
            "accept",
            "reject",
            "domains",
            "exclude-domains",
            "include-directories",
            "exclude-directories",
            "user",
            "password",
            "http-user",
            "http-password",
            "post-data",
            "post-file",
            "body-data",
            "body-file",
            "method",
            "referer",
            "load-cookies",
            "save-cookies",
            "ca-certificate",
            "certificate",
            "private-key",
            "bind-address",
            "limit-rate",
            "restrict-file-names",
            "config",
            "dns-timeout",
            "connect-timeout",
            "read-timeout",
            "waitretry",
            "local-encoding",
            "remote-encoding",
        ],
        short_hosts: "",
        long_hosts: &["proxy", "http-proxy", "https-proxy"],
        port_option: None,
        positional: Positional::Urls,
    },
];

fn client_named(base: &str) -> Option<&'static Client> {
    CLIENTS.iter().find(|c| c.names.contains(&base))
}

/// The hosts in an option value that names hosts: a comma list of hosts, `host:port`,
/// URLs, or `:`-separated fields with hosts among them (curl `--connect-to`).
fn option_value_hosts(value: &str) -> Vec<Hit> {
    let mut hits = Vec::new();
    for part in value.split(',').map(trim_token).filter(|p| !p.is_empty()) {
        let direct = scan_one(part, Ctx::Hint).unwrap_or_default();
        if !direct.is_empty() {
            hits.extend(direct);
            continue;
        }
        let (head, rest) = split_remote(part);
        if let Some(hit) = user_at_host(head, false, Names::AnyName) {
            hits.push(hit);
        }
        // `a.example:443:10.0.0.1`, `a.example:443:b.example:443`.
        let mut tail = rest;
        let mut fields = vec![head];
        while let Some(t) = tail {
            let (field, next) = split_remote(t);
            fields.push(field);
            tail = next;
        }
        if fields.len() > 1 {
            hits.extend(
                fields
                    .into_iter()
                    .filter_map(|f| host_like(f, Names::DomainsOnly))
                    .map(|h| Hit::new(&h, None, HOW_HINT)),
            );
        }
    }
    for hit in &mut hits {
        hit.how = HOW_HINT;
    }
    hits
}

fn client_pass(client: &Client, args: &[String], offset: usize, out: &mut Found) {
    let mut positionals: Vec<(usize, &str)> = Vec::new();
    let mut port: Option<u16> = None;
    let mut options_done = false;
    let destination_only = matches!(client.positional, Positional::Destination { .. });
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let idx = offset + i;
        i += 1;
        if !options_done && arg == "--" {
            options_done = true;
            continue;
        }
        if !options_done && let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let is_host = client.long_hosts.contains(&name);
            if is_host || client.long_values.contains(&name) {
                let value = match inline {
                    Some(v) => Some((idx, v)),
                    None => {
                        i += 1;
                        args.get(i - 1).map(|v| (offset + i - 1, v.as_str()))
                    }
                };
                if let (true, Some((vidx, v))) = (is_host, value) {
                    out.push_all(vidx, option_value_hosts(v));
                }
            }
            continue;
        }
        if !options_done && arg.len() > 1 && arg.starts_with('-') {
            for (k, c) in arg.char_indices().skip(1) {
                let takes_host = client.short_hosts.contains(c);
                let is_port = client.port_option == Some(c);
                if !(takes_host || is_port || client.short_values.contains(c)) {
                    continue;
                }
                let attached = &arg[k + c.len_utf8()..];
                let value = if attached.is_empty() {
                    i += 1;
                    args.get(i - 1).map(|v| (offset + i - 1, v.as_str()))
                } else {
                    Some((idx, attached))
                };
                if let Some((vidx, v)) = value {
                    if takes_host {
                        out.push_all(vidx, option_value_hosts(v));
                    } else if is_port {
                        port = super::parse_port(v);
                    }
                }
                break;
            }
            continue;
        }
        positionals.push((idx, arg));
        if destination_only && positionals.len() == 2 {
            // The rest is the remote command (ssh) or not a host (nc's port range).
            break;
        }
    }
    match client.positional {
        Positional::Destination { port_follows } => {
            let Some(&(idx, dest)) = positionals.first() else {
                return;
            };
            let dest = trim_token(dest);
            if url_scheme(dest).is_some() {
                return;
            }
            let (head, _path) = split_remote(dest);
            let host_text = head.rsplit_once('@').map_or(head, |(_, h)| h);
            let Some(host) = host_like(host_text, Names::AnyName) else {
                return;
            };
            let port = if port_follows {
                positionals
                    .get(1)
                    .and_then(|(_, p)| super::parse_port(p))
                    .or(port)
            } else {
                port
            };
            out.push(idx, host.to_string(), port, HOW_CLIENT);
        }
        Positional::Remote(names) => {
            for &(idx, arg) in &positionals {
                let arg = trim_token(arg);
                if url_scheme(arg).is_some() {
                    continue;
                }
                let (head, rest) = split_remote(arg);
                if rest.is_none() || head.contains(['/', '\\']) {
                    continue;
                }
                let host_text = head.rsplit_once('@').map_or(head, |(_, h)| h);
                if let Some(host) = host_like(host_text, names) {
                    out.push(idx, host.to_string(), port, HOW_CLIENT);
                }
            }
        }
        Positional::Domains => {
            for &(idx, arg) in &positionals {
                let arg = trim_token(arg);
                let arg = arg.strip_prefix('@').unwrap_or(arg);
                let host =
                    host_like(arg, Names::DomainsOnly).or_else(|| {
                        match CanonicalHost::parse(arg) {
                            Ok(ip @ CanonicalHost::Ip(_)) if arg.contains(':') => Some(ip),
                            _ => None,
                        }
                    });
                if let Some(host) = host {
                    out.push(idx, host.to_string(), None, HOW_CLIENT);
                }
            }
        }
        Positional::Urls => {
            for &(idx, arg) in &positionals {
                let arg = trim_token(arg);
                if url_scheme(arg).is_some() {
                    continue;
                }
                if let Some((host, port)) = schemeless(arg, Names::DomainsOnly) {
                    out.push(idx, host.to_string(), port, HOW_CLIENT);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
