//! Builds `tierbox-init`, the freestanding program the native Tier C sandbox's pid 1
//! execs once the program runs (`src/linux/ns/init/`), for Linux on x86-64 and AArch64.
//!
//! The program is compiled by the same `rustc` as the crate, for the crate's target,
//! with `core` only, and linked statically with the toolchain's own `rust-lld` (so no C
//! toolchain for the target is needed): an ELF executable of about 2 KiB that the crate
//! embeds (`include_bytes!`) when `cfg(tierbox_init_image)` is set. Elsewhere nothing is
//! built and the crate's pid 1 reaps in process.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tierbox_init)");
    println!("cargo::rustc-check-cfg=cfg(tierbox_init_image)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/linux/ns/init");

    let target = env("TARGET");
    let os = env("CARGO_CFG_TARGET_OS");
    let arch = env("CARGO_CFG_TARGET_ARCH");
    if os != "linux" || !(arch == "x86_64" || arch == "aarch64") {
        return;
    }
    let out = PathBuf::from(env("OUT_DIR")).join("tierbox-init");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut failures = Vec::new();
    // The toolchain's own linker first; a C compiler driver for the host as the fallback.
    let linkers: [&[&str]; 2] = [
        &[
            "-Clinker=rust-lld",
            "-Clinker-flavor=ld.lld",
            "-Clink-arg=-static",
        ],
        &[
            "-Clink-arg=-nostartfiles",
            "-Clink-arg=-nostdlib",
            "-Clink-arg=-static",
        ],
    ];
    for linker in linkers {
        let output = Command::new(&rustc)
            .args(["--edition", "2024", "--crate-type", "bin"])
            .args(["--crate-name", "tierbox_init", "--target", &target])
            .args(["--cfg", "tierbox_init"])
            .args([
                "-Cpanic=abort",
                "-Copt-level=s",
                "-Ccodegen-units=1",
                "-Crelocation-model=static",
                "-Cdebuginfo=0",
                "-Cstrip=symbols",
                "-Dwarnings",
            ])
            .args(linker)
            .arg("src/linux/ns/init/main.rs")
            .arg("-o")
            .arg(&out)
            .output();
        match output {
            Ok(o) if o.status.success() => {
                println!("cargo::rustc-cfg=tierbox_init_image");
                return;
            }
            Ok(o) => failures.push(format!(
                "{}: {}",
                linker.join(" "),
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => failures.push(format!("{}: {e}", linker.join(" "))),
        }
    }
    panic!(
        "cannot build tierbox-init (the Tier C sandbox's pid 1) for {target}:\n{}",
        failures.join("\n")
    );
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}
