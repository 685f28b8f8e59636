//! `tierbox`: `run` and `check` in this program; every other command, and Tier A runs,
//! by `tierbox-full` beside it (see the `tierbox_cli` crate docs).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    tierbox_cli::main()
}
