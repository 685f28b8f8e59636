//! The per-run resource limiter: memory and table sizes, instance, memory and table
//! counts. It records the first limit that refused a request, so the outcome can say which
//! limit the guest hit even when the guest handled the failure (`memory.grow` returns -1).
//!
//! `wasm.memory_bytes` bounds the whole run: one store holds every instance of a run, and
//! the limiter keeps the sum of all its linear memories and tables (at
//! [`TABLE_ELEMENT_BYTES`] an element) at or under it — a module with 31 memories gets
//! no more than one with one.

use tierbox_policy::wasm::WasmLimitsPlan;
use wasmtime::ResourceLimiter;

use crate::run::WasmLimit;

/// Bytes a table element counts for against `wasm.memory_bytes` (a reference: what a
/// `funcref` or `externref` slot takes on a 64-bit host).
pub const TABLE_ELEMENT_BYTES: usize = 8;

#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    count: usize,
    /// Bytes of every linear memory and table of the run, now.
    total_bytes: usize,
    /// The first limit that refused something.
    pub(crate) hit: Option<WasmLimit>,
    /// Largest total of the run's linear memories and tables at any time, in bytes.
    pub(crate) peak_memory_bytes: u64,
}

impl Limiter {
    pub(crate) fn new(limits: &WasmLimitsPlan) -> Self {
        Self {
            memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
            table_elements: usize::try_from(limits.table_elements).unwrap_or(usize::MAX),
            count: usize::try_from(limits.instances).unwrap_or(usize::MAX),
            total_bytes: 0,
            hit: None,
            peak_memory_bytes: 0,
        }
    }

    fn refuse(&mut self, what: WasmLimit) -> wasmtime::Result<bool> {
        self.hit.get_or_insert(what);
        Ok(false)
    }

    /// Takes a memory or table from `current` to `desired` bytes when the run's total
    /// stays within `wasm.memory_bytes`.
    fn resize(&mut self, current: usize, desired: usize) -> bool {
        let total = self
            .total_bytes
            .saturating_sub(current)
            .saturating_add(desired);
        if total > self.memory_bytes {
            return false;
        }
        self.total_bytes = total;
        self.peak_memory_bytes = self.peak_memory_bytes.max(total as u64);
        true
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.resize(current, desired) {
            return self.refuse(WasmLimit::Memory);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return self.refuse(WasmLimit::Table);
        }
        let bytes = |elements: usize| elements.saturating_mul(TABLE_ELEMENT_BYTES);
        if !self.resize(bytes(current), bytes(desired)) {
            return self.refuse(WasmLimit::Memory);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.count
    }

    fn tables(&self) -> usize {
        self.count
    }

    fn memories(&self) -> usize {
        self.count
    }
}
