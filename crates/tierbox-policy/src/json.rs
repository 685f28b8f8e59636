//! Strict JSON: a document with a duplicate object key is refused.
//!
//! `serde_json` keeps the last of two equal keys in a map and a `Value`, so
//! `{"exit_code": 0, "exit_code": 1}` reads as 1 to one parser and 0 to another. Every
//! JSON document Tierbox reads from outside — requests, policies, attestations, outcomes
//! and audit log lines — goes through [`from_slice`] or [`value`], which refuse it
//! (keys are compared after unescaping: `"\u0065xit_code"` is `exit_code`).

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as JSON, refusing duplicate keys at any depth, then as a `T` (errors
/// keep `serde_json`'s line and column).
///
/// ```
/// use tierbox_policy::json;
/// let ok: serde_json::Value = json::from_slice(br#"{"a": 1, "b": {"a": 2}}"#).unwrap();
/// assert_eq!(ok["b"]["a"], 2);
/// let err = json::from_slice::<serde_json::Value>(br#"{"a": 1, "\u0061": 2}"#).unwrap_err();
/// assert!(err.to_string().contains("duplicate key \"a\""));
/// ```
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes)?;
    serde_json::from_slice(bytes)
}

/// Parses `text` as a JSON value, refusing duplicate keys at any depth.
pub fn value(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(text).map(|s| s.0)
}

/// A JSON value read with duplicate keys refused.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_at_every_depth_and_the_rest_reads_as_serde_json_does() {
        for bad in [
            r#"{"a":1,"a":1}"#,
            r#"{"x":[{"k":1,"k":2}]}"#,
            r#"{"exit_code":0,"\u0065xit_code":1}"#,
        ] {
            assert!(value(bad).is_err(), "{bad}");
        }
        for good in [
            r#"{"a":1,"b":[1,2.5,-3,null,true,"s"],"c":{"a":{}}}"#,
            "18446744073709551615",
            "-9223372036854775808",
            r#""\ud83d\ude00""#,
        ] {
            assert_eq!(
                value(good).unwrap(),
                serde_json::from_str::<Value>(good).unwrap()
            );
        }
    }
}
