#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn rejection() -> Attestation {
    Attestation {
        version: ATTESTATION_VERSION,
        id: "ffeeddccbbaa99887766554433221100".to_owned(),
        started_unix_ms: 1_767_225_600_000,
        ended_unix_ms: 1_767_225_600_000,
        policy_digest: sha256_hex(b"policy"),
        request_digest: sha256_hex(b"request"),
        body: Body::Rejection {
            code: "path_outside_workspace".to_owned(),
            message: "argument 1 (/etc/shadow) is outside the workspace".to_owned(),
        },
    }
}

/// Golden values, computed independently with Python (`json.dumps(v, sort_keys=True,
/// separators=(",", ":"), ensure_ascii=False)`, `hashlib.sha256`, and `cryptography`'s
/// Ed25519 with the seed `[7; 32]`). A change here changes every published digest and
/// must bump `ATTESTATION_VERSION`.
#[test]
fn golden_digests() {
    let a = example_attestation();
    let text = String::from_utf8(signed_bytes(&a).unwrap()).unwrap();
    assert_eq!(text, GOLDEN_SIGNED_TEXT);
    let Body::Run(run) = &a.body else { panic!() };
    assert_eq!(run.outcome_digest, GOLDEN_OUTCOME_DIGEST);
    assert_eq!(attestation_digest(&a).unwrap(), GOLDEN_ATTESTATION_DIGEST);
    assert_eq!(
        attestation_digest(&rejection()).unwrap(),
        GOLDEN_REJECTION_DIGEST
    );
    assert_eq!(
        egress_decisions_digest(&serde_json::json!([{"host": "pypi.org", "allowed": true}]))
            .unwrap(),
        GOLDEN_EGRESS_DIGEST
    );
    // Ed25519 is deterministic: the signature is golden too.
    let signed = sign(a, &key()).unwrap();
    assert_eq!(signed.signature, GOLDEN_SIGNATURE);
    assert_eq!(
        signed.public_key,
        "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c"
    );
}

const GOLDEN_SIGNED_TEXT: &str = "tierbox.attestation.v1\n{\"body\":{\"backend\":\"linux-native\",\"egress_decisions_digest\":null,\
\"enforcement\":{\"landlock\":{\"abi\":6,\"status\":\"fully_enforced\"},\"seccomp\":true},\"kind\":\"run\",\
\"outcome\":{\"duration_ms\":12,\"exit_code\":0,\"limit_hit\":null,\
\"redacted_stderr_sha256\":\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\
\"redacted_stdout_sha256\":\"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\",\"signal\":null,\
\"stderr_sha256\":\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\
\"stdout_sha256\":\"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\"},\
\"outcome_digest\":\"4aff65308b54b362731c1b3f74cf47e0fe1dec227ad4f3054809da00402a9130\",\
\"plan_digest\":\"64879f7d6b960a01909762d911a32d4582c20010c5641ee90278b644a9e3b525\",\"tier\":\"b\"},\
\"ended_unix_ms\":1767225600012,\"id\":\"000102030405060708090a0b0c0d0e0f\",\
\"policy_digest\":\"823412d1eacb67956220e532959f0104603057c88704863ca38e7cd188fda812\",\
\"request_digest\":\"1f58b9145b24d108d7ac38887338b3ea3229833b9c1e418250343f907bfd1047\",\
\"started_unix_ms\":1767225600000,\"version\":1}";
const GOLDEN_OUTCOME_DIGEST: &str =
    "4aff65308b54b362731c1b3f74cf47e0fe1dec227ad4f3054809da00402a9130";
const GOLDEN_ATTESTATION_DIGEST: &str =
    "b76a590405fdd5556e557173360b98d4deeb220e390a3169a66f1ec5d2f1b364";
const GOLDEN_REJECTION_DIGEST: &str =
    "78fae2faebb36979b4ad16d093668219d8b5b115c7e69612bb7cabe38a0f4a69";
const GOLDEN_EGRESS_DIGEST: &str =
    "2cb1d07ff50a9af0f09a414288e5366f8e63d9b7829960535e403e91129a8011";
const GOLDEN_SIGNATURE: &str = "9025105548e53f4e7fe104901042c34388d5728f26d80ee5658bca78a8f2a7ac\
    6e2df42ffd089deb4d2774df20287d7934ff34fa5e7e7cadfdc8bee30c00160e";

#[test]
fn signed_envelopes_verify() {
    for a in [example_attestation(), rejection()] {
        let s = sign(a, &key()).unwrap();
        verify_envelope(&s, Some(&key().verifying_key())).unwrap();
        verify_envelope(&s, None).unwrap();
        let text = serde_json::to_string(&s).unwrap();
        let back: SignedAttestation = serde_json::from_str(&text).unwrap();
        verify_envelope(&back, Some(&key().verifying_key())).unwrap();
    }
}

#[test]
fn every_flipped_byte_fails() {
    for a in [example_attestation(), rejection()] {
        let text = serde_json::to_string(&sign(a, &key()).unwrap()).unwrap();
        let bytes = text.as_bytes();
        let trusted = key().verifying_key();
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0x20, 0x80] {
                let mut b = bytes.to_vec();
                b[i] ^= mask;
                let ok = serde_json::from_slice::<SignedAttestation>(&b)
                    .ok()
                    .is_some_and(|e| verify_envelope(&e, Some(&trusted)).is_ok());
                assert!(
                    !ok,
                    "flipping byte {i} ({:?}) with {mask:#x} still verifies",
                    char::from(bytes[i])
                );
            }
        }
    }
}

#[test]
fn wrong_key_fails() {
    let s = sign(example_attestation(), &key()).unwrap();
    let other = SigningKey::from_bytes(&[8; 32]);
    assert!(matches!(
        verify_envelope(&s, Some(&other.verifying_key())),
        Err(VerifyError::UntrustedKey { .. })
    ));
    // Swapping in another key without re-signing: the signature no longer verifies.
    let mut forged = s.clone();
    forged.public_key = hex(other.verifying_key().as_bytes());
    assert!(matches!(
        verify_envelope(&forged, None),
        Err(VerifyError::BadSignature { .. })
    ));
    // Re-signing with another key verifies only under that key.
    let resigned = sign(s.attestation, &other).unwrap();
    assert!(verify_envelope(&resigned, Some(&key().verifying_key())).is_err());
}

#[test]
fn tampered_fields_are_named() {
    let s = sign(example_attestation(), &key()).unwrap();
    let mut t = s.clone();
    t.attestation.ended_unix_ms += 1;
    assert!(matches!(
        verify_envelope(&t, None),
        Err(VerifyError::DigestMismatch { .. })
    ));
    let mut t = s.clone();
    if let Body::Run(run) = &mut t.attestation.body {
        run.outcome.exit_code = Some(1);
    }
    assert!(matches!(
        verify_envelope(&t, None),
        Err(VerifyError::OutcomeDigestMismatch { .. })
    ));
    let mut t = s.clone();
    t.digest = attestation_digest(&t.attestation)
        .unwrap()
        .replace('a', "b");
    assert!(verify_envelope(&t, None).is_err());
    let mut t = s;
    t.attestation.version = 2;
    assert_eq!(
        verify_envelope(&t, None),
        Err(VerifyError::UnsupportedVersion(2))
    );
}

#[test]
fn unknown_fields_are_refused() {
    let mut v = serde_json::to_value(sign(example_attestation(), &key()).unwrap()).unwrap();
    v["attestation"]["body"]["extra"] = serde_json::json!(1);
    assert!(serde_json::from_value::<SignedAttestation>(v).is_err());
}

#[test]
fn ids_are_random_128_bit_hex() {
    let (a, b) = (new_id().unwrap(), new_id().unwrap());
    assert_eq!(a.len(), 32);
    assert!(
        a.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(a, b);
}
