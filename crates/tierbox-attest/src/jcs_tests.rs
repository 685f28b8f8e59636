#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn num(bits: u64) -> String {
    jcs(&Value::from(f64::from_bits(bits))).unwrap()
}

/// RFC 8785 Appendix B: IEEE 754 doubles and their canonical text.
#[test]
fn rfc8785_appendix_b_numbers() {
    let cases: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, want) in cases {
        assert_eq!(num(*bits), *want, "bits {bits:016x}");
    }
}

/// RFC 8785 §3.2.2: the main example (numbers, string escaping, literals).
#[test]
fn rfc8785_main_example() {
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let mut v: Value = serde_json::from_str(input).unwrap();
    // serde_json's default float parser is not correctly rounded (its `float_roundtrip`
    // feature is off); Rust's `str::parse` is, and gives the double the RFC means.
    v["numbers"][0] = Value::from("333333333.33333329".parse::<f64>().unwrap());
    assert_eq!(
        jcs(&v).unwrap(),
        "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
         \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
    );
}

/// RFC 8785 §3.2.3: property sorting by UTF-16 code units, with a non-BMP key.
#[test]
fn rfc8785_sorting_example() {
    let input = r#"{
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\ud83d\ude00": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    let v: Value = serde_json::from_str(input).unwrap();
    let out = jcs(&v).unwrap();
    let want = [
        ("\\r", "Carriage Return"),
        ("1", "One"),
        ("\u{80}", "Control"),
        ("\u{f6}", "Latin Small Letter O With Diaeresis"),
        ("\u{20ac}", "Euro Sign"),
        ("\u{1F600}", "Emoji: Grinning Face"),
        ("\u{fb33}", "Hebrew Letter Dalet With Dagesh"),
    ]
    .iter()
    .map(|(k, v)| format!("\"{k}\":\"{v}\""))
    .collect::<Vec<_>>()
    .join(",");
    assert_eq!(out, format!("{{{want}}}"));
    // Byte order would put U+FB33 (EF AC B3) before U+1F600 (F0 9F 98 80): JCS must not.
    assert!(out.find('\u{1F600}').unwrap() < out.find('\u{fb33}').unwrap());
}

#[test]
fn string_escapes_are_minimal_and_lowercase() {
    let s: String = (0u8..0x20)
        .map(char::from)
        .chain("\"\\/\u{7f}\u{2028}é".chars())
        .collect();
    assert_eq!(
        jcs(&Value::String(s)).unwrap(),
        "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\
         \\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\
         \\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\\"\\\\/\u{7f}\u{2028}é\""
    );
}

#[test]
fn integers_beyond_2_pow_53_are_refused() {
    let out_of_range = |s: &str| Err(JcsError::IntegerOutOfRange(s.to_owned()));
    assert_eq!(
        jcs(&json!(9007199254740993u64)),
        out_of_range("9007199254740993")
    );
    assert_eq!(
        jcs(&json!(-9007199254740993i64)),
        out_of_range("-9007199254740993")
    );
    assert_eq!(jcs(&json!(1u64 << 63)), out_of_range("9223372036854775808"));
    assert_eq!(
        jcs(&json!([{"a": u64::MAX}])),
        out_of_range("18446744073709551615")
    );
    assert_eq!(jcs(&json!(i64::MIN)), out_of_range("-9223372036854775808"));
    assert_eq!(jcs(&json!(-42)).unwrap(), "-42");
    assert_eq!(
        jcs(&json!(9007199254740992u64)).unwrap(),
        "9007199254740992"
    );
    assert_eq!(
        jcs(&json!(-9007199254740992i64)).unwrap(),
        "-9007199254740992"
    );
    // As a double, 2^63 has the ECMAScript form of the RFC.
    assert_eq!(
        jcs(&json!(9223372036854775808.0f64)).unwrap(),
        "9223372036854776000"
    );
}

#[test]
fn no_whitespace_and_nested_order() {
    let v = json!({"z": {"b": [], "a": {}}, "a": [{"y": 1, "x": 2}]});
    assert_eq!(
        jcs(&v).unwrap(),
        r#"{"a":[{"x":2,"y":1}],"z":{"a":{},"b":[]}}"#
    );
}

/// Attestation-like values: nested objects and arrays of integers (within ±2^53), strings
/// over the full Unicode range, booleans and null. Floats are left out because JSON
/// parsing turns `1.0` into the integer `1` (a different `Value`), and attestations hold
/// none.
fn attestation_like() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
        any::<u32>().prop_map(Value::from),
        "\\PC*".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
        "[a-f0-9]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner.clone(), 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn jcs_round_trips(v in attestation_like()) {
        let text = jcs(&v).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &v);
        // Canonical: encoding the parsed value gives the same bytes.
        prop_assert_eq!(jcs(&back).unwrap(), text);
    }

    #[test]
    fn jcs_is_injective(a in attestation_like(), b in attestation_like()) {
        prop_assert_eq!(a == b, jcs(&a).unwrap() == jcs(&b).unwrap());
    }

    #[test]
    fn jcs_is_injective_on_small_edits(v in attestation_like(), s in any::<String>()) {
        // Wrapping in different shapes must never collide.
        let x = json!({"k": v.clone(), "s": s.clone()});
        let y = json!({"k": [v.clone()], "s": s.clone()});
        let z = json!({"k": v, "s": format!("{s}\u{0}")});
        let (ex, ey, ez) = (jcs(&x).unwrap(), jcs(&y).unwrap(), jcs(&z).unwrap());
        prop_assert_ne!(&ex, &ey);
        prop_assert_ne!(&ex, &ez);
    }

    #[test]
    fn finite_doubles_round_trip(bits in any::<u64>()) {
        let f = f64::from_bits(bits);
        prop_assume!(f.is_finite());
        let text = jcs(&Value::from(f)).unwrap();
        let back: f64 = text.parse().unwrap();
        prop_assert_eq!(back, if f == 0.0 { 0.0 } else { f });
    }
}
