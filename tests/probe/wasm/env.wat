;; env.wat: Tier A guarantee "the guest's environment is exactly what was granted":
;; variables set in the request (`env`) and supervisor variables passed by name
;; (`grants.env`), each listed in the policy's `wasm.allow_env`; nothing else of the
;; supervisor's environment.
;;
;; Usage: env.wasm
;;
;; Prints `count=<n>` and then every environment entry, one `NAME=value` per line, in the
;; order the host gives them; exits 0 (returns from _start). Exits 2 with `too big` when
;; the environment does not fit its buffers (more than 256 entries or 16 KiB).
(module
  (import "wasi_snapshot_preview1" "environ_sizes_get"
    (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get"
    (func $environ_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  ;; Memory map:
  ;;   [0, 16)          fd_write ciovec (ptr, len) and nwritten
  ;;   [16, 24)         environment count, environment buffer size
  ;;   [64, 96)         decimal digits
  ;;   [128, 512)       NUL-terminated strings
  ;;   [1024, 2048)     environment pointers (at most 256)
  ;;   [4096, 20480)    environment bytes (at most 16 KiB)
  (memory (export "memory") 1)
  (data (i32.const 128) "count=\00")
  (data (i32.const 144) "too big\n\00")
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
    (local $count i32) (local $i i32)
    (if (call $environ_sizes_get (i32.const 16) (i32.const 20))
      (then (call $proc_exit (i32.const 2))))
    (local.set $count (i32.load (i32.const 16)))
    (if (i32.or (i32.gt_u (local.get $count) (i32.const 256))
                (i32.gt_u (i32.load (i32.const 20)) (i32.const 16384)))
      (then
        (call $puts (i32.const 144))
        (call $proc_exit (i32.const 2))))
    (if (call $environ_get (i32.const 1024) (i32.const 4096))
      (then (call $proc_exit (i32.const 2))))
    (call $puts (i32.const 128))
    (call $print_num (local.get $count))
    (call $puts (i32.const 200))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (call $puts (i32.load (i32.add (i32.const 1024) (i32.shl (local.get $i) (i32.const 2)))))
        (call $puts (i32.const 200))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each))))
)
