//! Termination end to end, in memory: a client that trusts only the run's CA, the proxy's
//! [`terminate`] and [`relay::relay`], and an upstream with its own test CA that logs
//! every request it receives and echoes the `Authorization` it got, in a header and in
//! its body.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, duplex};

use super::relay::{
    Authority, Credential, HostRules, Place, RelayReport, RequestRule, Secret, relay,
};
use super::*;

const SECRET: &str = "ghp_realSecretValue0123456789abcdefXYZ";
const PLACEHOLDER: &str = "tbx_ph_5c1f0e9a7b3d4e2f";

fn host() -> CanonicalHost {
    CanonicalHost::parse("api.test").unwrap()
}

/// A test CA and a leaf for `name` signed by it: (CA PEM, server config).
fn upstream_identity(name: &str) -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    (ca.pem(), Arc::new(config))
}

/// Serves one TLS connection on `io`: every request's head is logged; the answer echoes
/// its `Authorization` in `X-Echo` and in the body.
async fn upstream<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    config: Arc<rustls::ServerConfig>,
    log: Arc<Mutex<Vec<String>>>,
) {
    let Ok(mut tls) = tokio_rustls::TlsAcceptor::from(config).accept(io).await else {
        return;
    };
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let Ok(n @ 1..) = tls.read(&mut chunk).await else {
            return;
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let body_len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buf.len() < end + 4 + body_len {
                break;
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + body_len]).into_owned();
            buf.drain(..end + 4 + body_len);
            log.lock().unwrap().push(format!("{head}\r\n\r\n{body}"));
            let auth = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("authorization: ")
                        .or_else(|| l.strip_prefix("Authorization: "))
                })
                .unwrap_or("")
                .to_owned();
            let answer = format!("echo {auth}");
            let reply = format!(
                "HTTP/1.1 200 OK\r\nX-Echo: {auth}\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            );
            if tls.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// A client trusting only the certificate `ca`, TLS for `api.test` over `io`.
async fn client<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    ca: CertificateDer<'static>,
) -> Result<tokio_rustls::client::TlsStream<S>, std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("api.test").unwrap(), io)
        .await
}

fn rules() -> HostRules {
    let credential = |name: &str, place| Credential {
        name: name.to_owned(),
        place,
        placeholder: PLACEHOLDER.to_owned(),
        secret: Secret::new(SECRET.to_owned()),
    };
    HostRules {
        allow: vec![
            RequestRule::parse("GET /repos/*").unwrap(),
            RequestRule::parse("POST /graphql").unwrap(),
        ],
        credentials: vec![
            credential("github", Place::Header(hyper::header::AUTHORIZATION)),
            credential("github-query", Place::Query("access_token".to_owned())),
        ],
    }
}

struct Run {
    /// Each answer the client read, whole.
    answers: Vec<String>,
    /// What the upstream received.
    received: Vec<String>,
    report: RelayReport,
}

/// Sends `requests` (each a head and body, keep-alive) through a terminated connection
/// to an upstream whose CA the proxy trusts.
async fn through_the_proxy(requests: &[String]) -> Run {
    let ca = RunCa::new(&[host()], SystemTime::now(), Duration::from_secs(600)).unwrap();
    let ca_cert = ca.cert_der();
    let (upstream_pem, upstream_config) = upstream_identity("api.test");
    let trust = Upstream::only(&[upstream_pem]).unwrap();
    let (client_io, proxy_client) = duplex(64 * 1024);
    let (proxy_upstream, upstream_io) = duplex(64 * 1024);
    let log = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(upstream(upstream_io, upstream_config, log.clone()));
    let proxy = tokio::spawn(async move {
        let t = terminate(&ca, &trust, &host(), proxy_client, proxy_upstream)
            .await
            .unwrap();
        let authority = Authority {
            host: host(),
            port: 443,
        };
        relay(t.client, t.upstream, authority, rules()).await
    });
    let mut tls = client(client_io, ca_cert).await.unwrap();
    let mut answers = Vec::new();
    for request in requests {
        tls.write_all(request.as_bytes()).await.unwrap();
        answers.push(read_answer(&mut tls).await);
    }
    drop(tls);
    let report = proxy.await.unwrap();
    let received = log.lock().unwrap().clone();
    Run {
        answers,
        received,
        report,
    }
}

/// Reads one answer: its head and a `Content-Length` or chunked body.
async fn read_answer<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &mut tokio_rustls::client::TlsStream<S>,
) -> String {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = tls.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "closed before an answer: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let lower = head.to_ascii_lowercase();
        if let Some(len) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
        {
            if body.len() >= len.trim().parse::<usize>().unwrap() {
                return text;
            }
        } else if lower.contains("transfer-encoding: chunked") && body.ends_with("0\r\n\r\n") {
            return text;
        }
    }
}

fn get(path: &str, auth: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: api.test\r\nAuthorization: {auth}\r\nX-Other: {PLACEHOLDER}\r\n\r\n"
    )
}

#[tokio::test]
async fn the_upstream_gets_the_secret_and_the_sandbox_only_ever_the_placeholder() {
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{PLACEHOLDER}"));
    let body = format!("{{\"token\":\"{PLACEHOLDER}\"}}");
    let run = through_the_proxy(&[
            get("/repos/o/r", &format!("Bearer {PLACEHOLDER}")),
            get("/repos/o/r", &format!("Basic {basic}")),
            get(&format!("/repos/o/r?per_page=1&access_token={PLACEHOLDER}"), "none"),
            format!("POST /repos/o/r HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n"),
            format!("POST /graphql HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {PLACEHOLDER}\r\nContent-Length: {}\r\n\r\n{body}", body.len()),
    ])
    .await;
    let received = &run.received;
    assert_eq!(received.len(), 4, "{received:#?}");
    // The header, decoded Basic credentials and the query parameter carry the secret.
    assert!(
        received[0].contains(&format!("authorization: Bearer {SECRET}")),
        "{}",
        received[0]
    );
    let basic_secret =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{SECRET}"));
    assert!(received[1].contains(&basic_secret), "{}", received[1]);
    assert!(
        received[2].contains(&format!("access_token={SECRET}")),
        "{}",
        received[2]
    );
    // Never another header, never a body.
    for r in &received[..3] {
        assert!(r.contains(&format!("x-other: {PLACEHOLDER}")), "{r}");
    }
    assert!(received[3].ends_with(&body), "{}", received[3]);
    // The refused request reached nothing and says what would allow it.
    assert!(
        run.answers[3].starts_with("HTTP/1.1 403"),
        "{}",
        run.answers[3]
    );
    assert!(
        run.answers[3].contains("add \"POST /repos/o/r\""),
        "{}",
        run.answers[3]
    );
    assert_eq!(run.report.refused.len(), 1);
    // The rule the refusal suggests parses, and allows the request it refused.
    for r in &run.report.refused {
        let rule = RequestRule::parse(r.would_allow.as_deref().unwrap()).unwrap();
        assert!(rule.allows(&r.method, &r.path), "{r:?}");
    }
    assert_eq!(run.report.forwarded, 4);
    assert_eq!(run.report.injected.get("github"), Some(&3));
    assert_eq!(run.report.injected.get("github-query"), Some(&1));
    // The echoed secret comes back as the placeholder, in headers and body.
    for answer in &run.answers {
        assert!(!answer.contains(SECRET), "{answer}");
    }
    assert!(
        run.answers[0].contains(&format!("echo Bearer {PLACEHOLDER}")),
        "{}",
        run.answers[0]
    );
    assert!(
        run.answers[0].to_ascii_lowercase().contains(&format!(
            "x-echo: bearer {}",
            PLACEHOLDER.to_ascii_lowercase()
        )),
        "{}",
        run.answers[0]
    );
}

/// An upstream whose certificate the proxy's trust does not verify: the connection fails
/// closed, typed, and the upstream never gets a request (the client gets no handshake).
#[tokio::test]
async fn an_upstream_that_does_not_verify_fails_closed_and_gets_nothing() {
    let ca = RunCa::new(&[host()], SystemTime::now(), Duration::from_secs(600)).unwrap();
    let ca_cert = ca.cert_der();
    let (_its_own_ca, upstream_config) = upstream_identity("api.test");
    let (other_pem, _) = upstream_identity("api.test");
    let trust = Upstream::only(&[other_pem]).unwrap();
    let (client_io, proxy_client) = duplex(64 * 1024);
    let (proxy_upstream, upstream_io) = duplex(64 * 1024);
    let log = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(upstream(upstream_io, upstream_config, log.clone()));
    let proxy = tokio::spawn(async move {
        terminate(&ca, &trust, &host(), proxy_client, proxy_upstream)
            .await
            .map(|_| ())
    });
    let handshake = client(client_io, ca_cert).await;
    let refused = proxy.await.unwrap().unwrap_err();
    assert!(
        matches!(refused, TerminateError::Upstream { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("api.test"), "{refused}");
    assert!(handshake.is_err(), "the client was answered");
    assert!(log.lock().unwrap().is_empty());
}

/// Through the proxy itself: `CONNECT api.test:PORT` to a host with rules is answered,
/// then terminated; the upstream (a real TLS server on loopback with its own CA) gets the
/// secret, the refused request is a decision with its fix, the credential rule's use is
/// counted in the log, and plain HTTP to the host is refused.
#[tokio::test]
async fn the_proxy_terminates_a_connect_to_a_host_with_rules() {
    use crate::test_support::{config, connect, http_connect, read_head, start, wait_for_log};

    let (upstream_pem, upstream_config) = upstream_identity("api.test");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let served = log.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(upstream(stream, upstream_config.clone(), served.clone()));
        }
    });
    let termination = Termination::new(
        std::collections::BTreeMap::from([(host(), rules())]),
        SystemTime::now(),
        Duration::from_secs(600),
        Upstream::only(&[upstream_pem]).unwrap(),
    )
    .unwrap();
    let ca_cert = termination.ca().cert_der();
    let target = format!("api.test:{port}");
    let mut cfg = config(
        &[target.as_str(), "127.0.0.1"],
        &[("api.test", "127.0.0.1")],
    );
    cfg.terminate = Some(Arc::new(termination));
    let proxy = start(cfg);

    let (stream, head) = http_connect(&proxy, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = client(stream, ca_cert).await.unwrap();
    let request = get("/repos/o/r", &format!("Bearer {PLACEHOLDER}"));
    tls.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut tls).await;
    assert!(
        answer.contains(&format!("echo Bearer {PLACEHOLDER}")),
        "{answer}"
    );
    tls.write_all(b"DELETE /repos/o/r HTTP/1.1\r\nHost: api.test\r\n\r\n")
        .await
        .unwrap();
    assert!(read_answer(&mut tls).await.starts_with("HTTP/1.1 403"));
    drop(tls);
    let received = log.lock().unwrap().clone();
    assert_eq!(received.len(), 1, "{received:?}");
    assert!(received[0].contains(SECRET), "{}", received[0]);

    // Plain HTTP to the host: refused, never forwarded.
    let mut plain = connect(&proxy).await;
    let request =
        format!("GET http://api.test:{port}/repos/o/r HTTP/1.1\r\nHost: api.test\r\n\r\n");
    plain.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut plain).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");

    let logged = wait_for_log(&proxy, |l| {
        l.credentials_used.contains_key("github")
            && l.decisions
                .iter()
                .filter(|d| d.verdict == crate::Verdict::RequestRefused)
                .count()
                == 2
    })
    .await;
    assert_eq!(logged.credentials_used.get("github"), Some(&1));
    let refused: Vec<_> = logged
        .decisions
        .iter()
        .filter(|d| d.verdict == crate::Verdict::RequestRefused)
        .map(|d| d.message.clone())
        .collect();
    assert!(
        refused
            .iter()
            .any(|m| m.contains("add \"DELETE /repos/o/r\" to egress.hosts.\"api.test\".allow")),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|m| m.contains("https only")),
        "{refused:?}"
    );
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "plain HTTP reached the upstream"
    );
    // The terminated connection's decision counts the bytes it carried to and from the
    // upstream (TLS records, as a tunnel counts its bytes).
    let connect = logged
        .decisions
        .iter()
        .find(|d| d.verdict == crate::Verdict::Allowed && d.protocol == crate::Protocol::Connect)
        .unwrap();
    assert!(
        connect.bytes_sent > 0 && connect.bytes_received > 0,
        "{connect:?}"
    );
}

/// A request that names another host than the connection's (a CDN could route it, with
/// the secret, to another of its names), or whose path is not in normal form (the
/// upstream could resolve `..` past the rules), reaches nothing and gets no secret; the
/// refusal says why, with no rule to add (none would allow it).
#[tokio::test]
async fn another_host_or_a_path_outside_normal_form_is_refused_before_any_rule() {
    let get = |path: &str, host: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {PLACEHOLDER}\r\ncontent-length: 0\r\n\r\n"
        )
    };
    let run = through_the_proxy(&[
        get("/repos/../admin", "api.test"),
        get("/repos/%2E%2e/admin", "api.test"),
        get("/repos//o", "api.test"),
        get("/repos/o/r", "evil.test"),
        get("/repos/o/r", "api.test:8443"),
        get("/repos/o/r", "API.test:443"),
    ])
    .await;
    for (i, status) in [403, 403, 403, 421, 421, 200].into_iter().enumerate() {
        assert!(
            run.answers[i].starts_with(&format!("HTTP/1.1 {status}")),
            "{i}: {}",
            run.answers[i]
        );
    }
    assert_eq!(run.received.len(), 1, "{:?}", run.received);
    assert_eq!(run.report.forwarded, 1);
    assert_eq!(run.report.injected.get("github"), Some(&1));
    assert_eq!(run.report.refused.len(), 5);
    for r in &run.report.refused {
        assert_eq!(r.would_allow, None, "{r:?}");
        let why = r.reason.as_deref().unwrap();
        assert!(
            why.contains("normal form") || why.contains("is not api.test"),
            "{why}"
        );
    }
    assert!(
        run.answers[3].contains("its Host (evil.test) is not api.test"),
        "{}",
        run.answers[3]
    );
}
