//! Stdin: which source a run's stdin comes from, its limit, and its inline bytes.
//!
//! A run's stdin comes from at most one source: `stdin` (UTF-8 text), `stdin_base64`
//! (bytes of any kind) or a stream the caller holds (`stdin_stream`). Its limit is the
//! policy's `limits.stdin_bytes`, which a request may narrow (`stdin_limit_bytes`) and
//! never widen. Inline bytes past the limit are refused here, before anything runs; a
//! streamed stdin is cut at the limit by the supervisor, which reports it.

use crate::rejection::Rejection;

/// The stdin fields of a request (`process_run` and `wasm_run` alike).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StdinFields<'a> {
    /// `stdin`.
    pub(crate) text: Option<&'a str>,
    /// `stdin_base64`.
    pub(crate) base64: Option<&'a str>,
    /// `stdin_limit_bytes`.
    pub(crate) limit_bytes: Option<u64>,
    /// The caller streams stdin.
    pub(crate) stream: bool,
    /// The run is a background process, whose stdin is written by `process_write_stdin`
    /// calls (its inline stdin is the first of them); a stream cannot be its stdin.
    pub(crate) background: bool,
}

/// A run's stdin as the plan carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedStdin {
    /// The inline bytes; `Some(empty)` for a streamed stdin (a pipe); `None`: `/dev/null`.
    pub(crate) data: Option<Vec<u8>>,
    /// The bytes come from the caller's stream.
    pub(crate) streamed: bool,
    /// The run's stdin limit, in bytes.
    pub(crate) limit_bytes: u64,
}

impl ResolvedStdin {
    /// Whether the program may read anything from its stdin (for the interpreter check:
    /// program text read from stdin).
    pub(crate) fn given(&self) -> bool {
        self.streamed || self.data.as_ref().is_some_and(|d| !d.is_empty())
    }
}

/// Resolves the stdin fields against the policy's limit `policy_limit`
/// (`limits.stdin_bytes`).
pub(crate) fn resolve(
    policy_limit: u64,
    fields: StdinFields<'_>,
) -> Result<ResolvedStdin, Rejection> {
    let given: Vec<&str> = [
        (fields.text.is_some(), "stdin"),
        (fields.base64.is_some(), "stdin_base64"),
        (fields.stream, "a streamed stdin"),
        (
            fields.stream && fields.background,
            "background (whose stdin is written by process_write_stdin)",
        ),
    ]
    .into_iter()
    .filter_map(|(given, name)| given.then_some(name))
    .collect();
    if given.len() > 1 {
        return Err(Rejection::StdinConflict {
            fields: given.join(" and "),
        });
    }
    let limit_bytes = match fields.limit_bytes {
        Some(asked) if asked > policy_limit => {
            return Err(Rejection::LimitAbovePolicy {
                field: "stdin_limit_bytes".to_owned(),
                requested: asked,
                max: policy_limit,
            });
        }
        Some(asked) => asked,
        None => policy_limit,
    };
    let data = match (fields.text, fields.base64) {
        (Some(text), _) => Some(text.as_bytes().to_vec()),
        (None, Some(b64)) => Some(decode(b64)?),
        (None, None) if fields.stream => Some(Vec::new()),
        (None, None) => None,
    };
    if let Some(d) = &data {
        let bytes = d.len() as u64;
        if bytes > limit_bytes {
            return Err(Rejection::StdinTooLarge {
                bytes,
                max: limit_bytes,
            });
        }
    }
    Ok(ResolvedStdin {
        data,
        streamed: fields.stream,
        limit_bytes,
    })
}

fn decode(b64: &str) -> Result<Vec<u8>, Rejection> {
    if let Some((at, c)) = b64
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')))
    {
        return Err(Rejection::StdinBase64Invalid {
            reason: format!("{c:?} at byte {at} is not a base64 character"),
        });
    }
    crate::wasm::decode_base64(b64).ok_or_else(|| Rejection::StdinBase64Invalid {
        reason: format!(
            "{} characters cannot be base64 (padding only at the end, at most two '=', and never one character past a multiple of four)",
            b64.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>() -> StdinFields<'a> {
        StdinFields::default()
    }

    #[test]
    fn no_stdin_is_dev_null_and_a_stream_is_an_empty_pipe() {
        let r = resolve(10, fields()).unwrap();
        assert_eq!((r.data, r.streamed, r.limit_bytes), (None, false, 10));
        let r = resolve(
            10,
            StdinFields {
                stream: true,
                ..fields()
            },
        )
        .unwrap();
        assert_eq!((r.data, r.streamed), (Some(Vec::new()), true));
    }

    #[test]
    fn base64_gives_bytes_of_any_kind() {
        let r = resolve(
            10,
            StdinFields {
                base64: Some("AP//gA=="),
                ..fields()
            },
        )
        .unwrap();
        assert_eq!(r.data.unwrap(), [0, 0xff, 0xff, 0x80]);
    }

    #[test]
    fn two_sources_are_refused_naming_both() {
        for (f, named) in [
            (
                StdinFields {
                    text: Some("a"),
                    base64: Some("YQ=="),
                    ..fields()
                },
                "stdin and stdin_base64",
            ),
            (
                StdinFields {
                    base64: Some("YQ=="),
                    stream: true,
                    ..fields()
                },
                "stdin_base64 and a streamed stdin",
            ),
            (
                StdinFields {
                    stream: true,
                    background: true,
                    ..fields()
                },
                "a streamed stdin and background",
            ),
        ] {
            let err = resolve(10, f).unwrap_err();
            assert_eq!(err.code(), "input.stdin_conflict");
            assert!(err.to_string().starts_with(named), "{err}");
        }
    }

    #[test]
    fn bad_base64_is_refused_with_the_reason() {
        for bad in ["YQ= =", "Y", "YQ===", "Y\nQ=="] {
            let err = resolve(
                10,
                StdinFields {
                    base64: Some(bad),
                    ..fields()
                },
            )
            .unwrap_err();
            assert_eq!(err.code(), "input.stdin_encoding_invalid", "{bad:?}");
        }
    }

    #[test]
    fn the_limit_bounds_inline_bytes_and_a_request_may_only_narrow_it() {
        let err = resolve(
            3,
            StdinFields {
                text: Some("four"),
                ..fields()
            },
        )
        .unwrap_err();
        assert_eq!(err, Rejection::StdinTooLarge { bytes: 4, max: 3 });
        let err = resolve(
            10,
            StdinFields {
                text: Some("four"),
                limit_bytes: Some(3),
                ..fields()
            },
        )
        .unwrap_err();
        assert_eq!(err, Rejection::StdinTooLarge { bytes: 4, max: 3 });
        let err = resolve(
            10,
            StdinFields {
                limit_bytes: Some(11),
                stream: true,
                ..fields()
            },
        )
        .unwrap_err();
        assert_eq!(err.code(), "limits.above_policy");
        let r = resolve(
            10,
            StdinFields {
                limit_bytes: Some(4),
                text: Some("four"),
                ..fields()
            },
        )
        .unwrap();
        assert_eq!(r.limit_bytes, 4);
        // Zero: no stdin at all.
        assert!(resolve(0, fields()).is_ok());
        assert_eq!(
            resolve(
                0,
                StdinFields {
                    text: Some("x"),
                    ..fields()
                }
            )
            .unwrap_err()
            .code(),
            "input.stdin_too_large"
        );
    }
}
