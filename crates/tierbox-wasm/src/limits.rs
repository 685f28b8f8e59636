//! The per-run resource limiter: memory and table sizes, instance, memory and table
//! counts. It records the first limit that refused a request, so the outcome can say which
//! limit the guest hit even when the guest handled the failure (`memory.grow` returns -1).

use tierbox_policy::wasm::WasmLimitsPlan;
use wasmtime::ResourceLimiter;

use crate::run::WasmLimit;

#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    count: usize,
    /// The first limit that refused something.
    pub(crate) hit: Option<WasmLimit>,
    /// Largest linear memory size granted, in bytes.
    pub(crate) peak_memory_bytes: u64,
}

impl Limiter {
    pub(crate) fn new(limits: &WasmLimitsPlan) -> Self {
        Self {
            memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
            table_elements: usize::try_from(limits.table_elements).unwrap_or(usize::MAX),
            count: usize::try_from(limits.instances).unwrap_or(usize::MAX),
            hit: None,
            peak_memory_bytes: 0,
        }
    }

    fn refuse(&mut self, what: WasmLimit) -> wasmtime::Result<bool> {
        self.hit.get_or_insert(what);
        Ok(false)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return self.refuse(WasmLimit::Memory);
        }
        self.peak_memory_bytes = self.peak_memory_bytes.max(desired as u64);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return self.refuse(WasmLimit::Table);
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
