//! The built-in policy (`policies/strict.toml`) converted to JSON at build time: every
//! `tierbox` process that runs without `--policy` starts from it, and parsing the JSON
//! form costs a third of parsing the TOML (measured on the first parse in a process,
//! which is the only one a CLI call makes). The TOML stays the document people read and
//! edit; a unit test checks that both forms give the same policy.

use std::path::PathBuf;

const SOURCE: &str = "../../policies/strict.toml";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    // A broken document is not this script's to report: the JSON is left empty, the
    // TOML is still compiled in, and the crate's tests fail naming the TOML error.
    let json = std::fs::read_to_string(SOURCE)
        .ok()
        .and_then(|text| toml::from_str::<toml::Value>(&text).ok())
        .and_then(|value| serde_json::to_string(&value).ok())
        .unwrap_or_default();
    let Some(out) = std::env::var_os("OUT_DIR") else {
        panic!("cargo sets OUT_DIR for build scripts");
    };
    if let Err(e) = std::fs::write(PathBuf::from(out).join("strict.json"), json) {
        panic!("writing the built-in policy's JSON form: {e}");
    }
}
