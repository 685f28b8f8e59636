//! The browser origins allowed to open a term's WebSocket (`tierbox serve --ws-origin`).
//!
//! Any page a browser shows may open a WebSocket to a loopback address, and the browser
//! says whose page it is in the `Origin` header, which the page cannot forge. A
//! handshake with an `Origin` outside the allowlist is refused (`ws.origin_refused`)
//! before its ticket is looked at; one without an `Origin` is not from a browser page
//! (a browser always sends one on a WebSocket) and needs only its ticket. The list is
//! empty by default: no web page may attach.
//!
//! Origins are compared in their serialized form (RFC 6454: `scheme://host[:port]`,
//! lowercase, IDNA applied, the scheme's default port left out), so
//! `https://App.Example:443` in the list allows the `Origin: https://app.example` a
//! browser sends. The opaque origin `null` (a sandboxed frame, a `file:` page) is never
//! allowed.

/// Why an `--ws-origin` value is not an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--ws-origin {value:?} is not a web origin: give scheme://host[:port] with scheme http or \
     https and nothing after it ({why})"
)]
pub struct OriginError {
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The serialized origin of `value` when it is an `http` or `https` origin and nothing
/// more (no user, path, query or fragment).
///
/// ```
/// use tierbox_server::term_ws::origins::serialized;
///
/// assert_eq!(serialized("https://App.Example:443").unwrap(), "https://app.example");
/// assert_eq!(serialized("http://127.0.0.1:5173/").unwrap(), "http://127.0.0.1:5173");
/// assert!(serialized("https://app.example/path").is_err());
/// assert!(serialized("null").is_err());
/// ```
pub fn serialized(value: &str) -> Result<String, OriginError> {
    let refuse = |why| OriginError {
        value: value.to_owned(),
        why,
    };
    let url = url::Url::parse(value).map_err(|_| refuse("it does not parse as a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse("its scheme is not http or https"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it names a user"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(refuse("it has a path, a query or a fragment"));
    }
    if url.host().is_none() {
        return Err(refuse("it has no host"));
    }
    Ok(url.origin().ascii_serialization())
}

/// The origins allowed to open a term's WebSocket. Empty by default: no browser page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginAllowlist {
    allowed: Vec<String>,
}

/// What the `Origin` header of a handshake says, checked against the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginCheck {
    /// No `Origin` header: not a browser page.
    Absent,
    /// An allowed origin (as the header gave it).
    Allowed(String),
    /// Refused: not on the list, malformed, `null`, or more than one header.
    Refused(String),
}

impl OriginAllowlist {
    /// Allows `origin` (see [`serialized`]).
    pub fn allow(&mut self, origin: &str) -> Result<(), OriginError> {
        let origin = serialized(origin)?;
        if !self.allowed.contains(&origin) {
            self.allowed.push(origin);
        }
        Ok(())
    }

    /// The origins allowed, serialized.
    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }

    /// Checks the handshake's `Origin` header values (all of them: more than one is
    /// refused).
    ///
    /// ```
    /// use tierbox_server::term_ws::origins::{OriginAllowlist, OriginCheck};
    ///
    /// let mut list = OriginAllowlist::default();
    /// list.allow("https://app.example").unwrap();
    /// assert_eq!(list.check(&[]), OriginCheck::Absent);
    /// assert_eq!(list.check(&[b"https://app.example"]), OriginCheck::Allowed("https://app.example".into()));
    /// assert!(matches!(list.check(&[b"https://evil.example"]), OriginCheck::Refused(_)));
    /// ```
    pub fn check(&self, values: &[&[u8]]) -> OriginCheck {
        let shown = |v: &[u8]| String::from_utf8_lossy(v).chars().take(200).collect();
        match values {
            [] => OriginCheck::Absent,
            [one] => {
                let Ok(text) = std::str::from_utf8(one) else {
                    return OriginCheck::Refused(shown(one));
                };
                match serialized(text) {
                    Ok(origin) if self.allowed.contains(&origin) => {
                        OriginCheck::Allowed(text.to_owned())
                    }
                    _ => OriginCheck::Refused(shown(one)),
                }
            }
            [first, ..] => OriginCheck::Refused(shown(first)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_bare_http_and_https_origins_are_accepted() {
        for (value, want) in [
            ("https://app.example", "https://app.example"),
            ("HTTPS://APP.EXAMPLE:443/", "https://app.example"),
            ("http://localhost:8080", "http://localhost:8080"),
            ("http://[::1]:3000", "http://[::1]:3000"),
            ("https://bücher.example", "https://xn--bcher-kva.example"),
        ] {
            assert_eq!(serialized(value).unwrap(), want, "{value}");
        }
        for bad in [
            "",
            "null",
            "app.example",
            "ftp://app.example",
            "file:///tmp/x.html",
            "https://user@app.example",
            "https://app.example/app",
            "https://app.example?x=1",
            "https://app.example#top",
        ] {
            let e = serialized(bad).unwrap_err();
            assert!(e.to_string().contains("--ws-origin"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_header_is_compared_in_serialized_form_and_null_never_passes() {
        let mut list = OriginAllowlist::default();
        list.allow("https://app.example:443").unwrap();
        list.allow("https://app.example").unwrap();
        assert_eq!(list.allowed(), ["https://app.example"]);
        assert_eq!(
            list.check(&[b"https://app.example"]),
            OriginCheck::Allowed("https://app.example".into())
        );
        for refused in [
            &b"https://app.example.evil"[..],
            b"http://app.example",
            b"https://app.example:8443",
            b"null",
            b"\xff",
        ] {
            assert!(
                matches!(list.check(&[refused]), OriginCheck::Refused(_)),
                "{refused:?}"
            );
        }
        // Two headers: refused even when one is allowed.
        assert!(matches!(
            list.check(&[b"https://app.example", b"https://evil.example"]),
            OriginCheck::Refused(_)
        ));
        // The default list allows no page at all.
        assert!(matches!(
            OriginAllowlist::default().check(&[b"https://app.example"]),
            OriginCheck::Refused(_)
        ));
    }
}
