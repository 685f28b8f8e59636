//! A build identity shared by `tierbox` and `tierbox-full` when they come from one build:
//! `tierbox` hands commands to the `tierbox-full` beside it, which refuses them when it
//! is from another build (e.g. `cargo build --bin tierbox` relinked only one of them).
//! The identity changes whenever a workspace source or the lock file does.

use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    for watched in ["../../crates", "../../Cargo.lock", "../../Cargo.toml"] {
        println!("cargo:rerun-if-changed={watched}");
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    println!(
        "cargo:rustc-env=TIERBOX_BUILD_ID={}-{nanos:x}-{}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        std::process::id()
    );
}
