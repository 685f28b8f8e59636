//! Caps on what a module asks the compiler to do, checked before compiling.
//!
//! Compiling is the one part of a Tier A run the guest's limits (fuel, memory, the
//! deadline's epoch interruption) do not reach: cranelift's time and memory grow with the
//! size of each function, and a 45 MB module of one giant function took 36 s and 3.4 GB
//! where a 2 s deadline was asked for. These caps bound each function and their number,
//! with room to spare for real programs (CPython 3.12 for WASI: 11 448 functions, the
//! largest body 106 KB, at most 187 locals; QuickJS: 1 394, 48 KB, 45). The module's size
//! is capped by `wasm.max_module_bytes`, and compilations run one at a time
//! ([`crate::MAX_CONCURRENT_COMPILATIONS`]).

use wasmparser::{Parser, Payload};

/// Most functions with a body in a module (all core modules of a component together).
pub const MAX_FUNCTIONS: usize = 100_000;

/// Largest function body, in bytes.
pub const MAX_FUNCTION_BODY_BYTES: usize = 1024 * 1024;

/// Most locals declared in one function.
pub const MAX_FUNCTION_LOCALS: u64 = 10_000;

/// `Err(why)` when `binary` exceeds a cap. A module that is not well-formed passes: the
/// compiler's validation reports it, with its own message, before compiling anything.
pub(crate) fn check(binary: &[u8]) -> Result<(), String> {
    let mut functions = 0usize;
    for payload in Parser::new(0).parse_all(binary) {
        let Ok(payload) = payload else {
            return Ok(());
        };
        let Payload::CodeSectionEntry(body) = payload else {
            continue;
        };
        functions += 1;
        if functions > MAX_FUNCTIONS {
            return Err(format!(
                "it has more than {MAX_FUNCTIONS} functions (the compiler's cap)"
            ));
        }
        let size = body.range().len();
        if size > MAX_FUNCTION_BODY_BYTES {
            return Err(format!(
                "function {} has a body of {size} bytes, over the compiler's cap of {MAX_FUNCTION_BODY_BYTES}",
                functions - 1
            ));
        }
        let mut locals = 0u64;
        let Ok(reader) = body.get_locals_reader() else {
            return Ok(());
        };
        for entry in reader {
            let Ok((count, _)) = entry else {
                return Ok(());
            };
            locals = locals.saturating_add(u64::from(count));
        }
        if locals > MAX_FUNCTION_LOCALS {
            return Err(format!(
                "function {} declares {locals} locals, over the compiler's cap of {MAX_FUNCTION_LOCALS}",
                functions - 1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module_with_body(ops: usize, locals: u32) -> Vec<u8> {
        let body = format!(
            "(module (func (local {}) {}))",
            "i32 ".repeat(locals as usize),
            "(drop (i32.const 1)) ".repeat(ops)
        );
        wat::parse_str(&body).unwrap()
    }

    #[test]
    fn each_cap_refuses_and_names_itself() {
        assert_eq!(check(&module_with_body(10, 3)), Ok(()));
        let big = check(&module_with_body(MAX_FUNCTION_BODY_BYTES / 3 + 1, 0)).unwrap_err();
        assert!(big.contains("body of") && big.contains("cap"), "{big}");
        let locals = check(&module_with_body(1, 10_001)).unwrap_err();
        assert!(locals.contains("10001 locals"), "{locals}");
        let many =
            wat::parse_str(format!("(module {})", "(func)".repeat(MAX_FUNCTIONS + 1))).unwrap();
        assert!(check(&many).unwrap_err().contains("functions"));
        // Not well-formed: left to the compiler's validation.
        assert_eq!(check(b"\0asm\x01\0\0\0\x0a\xff"), Ok(()));
    }
}
