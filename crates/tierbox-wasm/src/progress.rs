//! Telling a user that a module is being compiled. Compiling a large module (CPython is
//! 26 MB of WebAssembly) takes seconds to tens of seconds the first time; afterwards the
//! compiled code comes from the memory or disk cache. A front end that has someone
//! watching (the CLI with a terminal on stderr) registers an observer and shows progress;
//! nothing is reported otherwise.
//!
//! ```
//! use tierbox_wasm::progress::{Compile, set_observer};
//! set_observer(|event| {
//!     if let Compile::Started { module_bytes } = event {
//!         eprintln!("compiling {module_bytes} bytes of WebAssembly…");
//!     }
//! });
//! ```

use std::sync::OnceLock;

/// A compilation's start or end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compile {
    /// A module missed both caches and is being compiled for this machine.
    Started {
        /// Size of the WebAssembly binary.
        module_bytes: usize,
    },
    /// That compilation ended (successfully or not).
    Finished {
        /// How long it took.
        millis: u64,
    },
}

type Observer = Box<dyn Fn(Compile) + Send + Sync>;

static OBSERVER: OnceLock<Observer> = OnceLock::new();

/// Registers the process's observer of compilations; the first registration wins.
pub fn set_observer(f: impl Fn(Compile) + Send + Sync + 'static) {
    let _ = OBSERVER.set(Box::new(f));
}

pub(crate) fn report(event: Compile) {
    if let Some(f) = OBSERVER.get() {
        f(event);
    }
}
