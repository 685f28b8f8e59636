;; memory.wat: Tier A guarantee "linear memory cannot grow past wasm.memory_bytes, and
;; hitting the limit is a clean, reported failure": `memory.grow` past the limit returns
;; -1 to the guest (no trap, no host crash), the guest carries on and exits normally, and
;; the run reports `limit = memory`.
;;
;; Usage: memory.wasm   (meant for a policy with wasm.memory_bytes = 2 MiB = 32 pages)
;;
;; Starts with 1 page (64 KiB), then:
;;   grow1 = memory.grow 15      -> 1   (16 pages = 1 MiB: within the limit)
;;   stores a byte in the last granted page (the grown memory is usable)
;;   grow2 = memory.grow 32      -> -1  (48 pages = 3 MiB: past the limit)
;;   grow3 = memory.grow 65535   -> -1  (past the limit and the wasm32 address space)
;;   pages = memory.size         -> 16  (the failed grows changed nothing)
;; Prints `grow1=<n> grow2=<n> grow3=<n> pages=<n>` and exits 42 through proc_exit.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  ;; Memory map:
  ;;   [0, 16)          fd_write ciovec (ptr, len) and nwritten
  ;;   [64, 96)         decimal digits
  ;;   [128, 512)       NUL-terminated strings
  (memory (export "memory") 1)
  (data (i32.const 128) "grow1=\00")
  (data (i32.const 144) " grow2=\00")
  (data (i32.const 160) " grow3=\00")
  (data (i32.const 176) " pages=\00")
  (data (i32.const 200) "\n\00")
  (data (i32.const 224) "-\00")

  ;; ---- output helpers (shared by every guest in this directory) ----------------------

  (func $write_fd (param $fd i32) (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))

  (func $print (param $ptr i32) (param $len i32)
    (call $write_fd (i32.const 1) (local.get $ptr) (local.get $len)))

  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $n))

  ;; Prints a NUL-terminated string.
  (func $puts (param $p i32)
    (call $print (local.get $p) (call $strlen (local.get $p))))

  ;; Prints a signed decimal number.
  (func $print_num (param $n i32)
    (local $p i32)
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then
        (call $puts (i32.const 224))
        (local.set $n (i32.sub (i32.const 0) (local.get $n)))))
    (local.set $p (i32.const 96))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (local.get $n)))
    (call $print (local.get $p) (i32.sub (i32.const 96) (local.get $p))))

  ;; ---- the probe ----------------------------------------------------------------------

  (func (export "_start")
    (local $grow1 i32) (local $grow2 i32) (local $grow3 i32)
    (local.set $grow1 (memory.grow (i32.const 15)))
    ;; Last byte of page 16 (only addressable if grow1 succeeded; traps otherwise).
    (if (i32.ge_s (local.get $grow1) (i32.const 0))
      (then (i32.store8 (i32.const 1048575) (i32.const 1))))
    (local.set $grow2 (memory.grow (i32.const 32)))
    (local.set $grow3 (memory.grow (i32.const 65535)))
    (call $puts (i32.const 128))
    (call $print_num (local.get $grow1))
    (call $puts (i32.const 144))
    (call $print_num (local.get $grow2))
    (call $puts (i32.const 160))
    (call $print_num (local.get $grow3))
    (call $puts (i32.const 176))
    (call $print_num (memory.size))
    (call $puts (i32.const 200))
    (call $proc_exit (i32.const 42)))
)
