//! The one unsafe operation of Tier A: turning precompiled machine code from the disk
//! cache back into a module or component.

use wasmtime::component::Component;
use wasmtime::{Engine, Module};

/// Loads a precompiled module that [`crate::cache`] wrote and verified.
///
/// The caller guarantees that `bytes` is exactly what `Module::serialize` produced in
/// this process or an earlier one: the cache directory is private to this user (0700,
/// owned by the effective uid, checked before use), files are written under a temporary
/// name and renamed into place, and the SHA-256 recorded next to each file when it was
/// written was compared with `bytes` just before this call.
pub(crate) fn load_module(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Module> {
    // SAFETY: wasmtime requires that the bytes come from `Module::serialize` with a
    // compatible engine and were not tampered with. They were produced by
    // `Module::serialize` (see the function comment for how that is verified: private
    // directory, atomic rename, SHA-256 checked immediately before), and wasmtime itself
    // checks the engine and version header and returns an error on a mismatch.
    unsafe { Module::deserialize(engine, bytes) }
}

/// Loads a precompiled component; the same guarantees as [`load_module`].
pub(crate) fn load_component(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: as for `load_module`: the bytes were produced by `Component::serialize`,
    // stored in a private directory by atomic rename, and their SHA-256 was verified just
    // before this call; wasmtime checks engine compatibility itself.
    unsafe { Component::deserialize(engine, bytes) }
}
