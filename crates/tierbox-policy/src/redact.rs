//! Output redaction. (Being completed.)

use std::borrow::Cow;

/// Redacts credentials from text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor that also hides each of `secrets` wherever it appears.
    pub fn new(secrets: &[String]) -> Self {
        Self { secrets: secrets.to_vec() }
    }

    /// Returns the redacted text and whether anything was redacted.
    pub fn redact<'a>(&self, text: &'a str) -> (Cow<'a, str>, bool) {
        let mut out = Cow::Borrowed(text);
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = Cow::Owned(out.replace(s.as_str(), "[REDACTED]"));
            }
        }
        let changed = matches!(out, Cow::Owned(_));
        (out, changed)
    }
}
