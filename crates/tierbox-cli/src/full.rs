//! `tierbox-full`: every `tierbox` command, Tier A and the servers included. `tierbox`
//! hands it what it does not run itself (see the `tierbox_cli` crate docs).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    tierbox_cli::full_main()
}
