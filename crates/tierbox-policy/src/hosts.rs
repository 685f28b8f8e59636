//! Host names: canonical form, allowlist patterns, extraction from arguments. (Being completed.)

use std::fmt;

use serde::{Deserialize, Serialize};

/// One egress allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    raw: String,
}

impl HostPattern {
    /// Parses an allowlist entry.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("empty".to_owned());
        }
        Ok(Self { raw: raw.to_ascii_lowercase() })
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl TryFrom<String> for HostPattern {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s)
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.raw
    }
}
