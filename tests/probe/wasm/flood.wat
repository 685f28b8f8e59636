;; flood.wat: Tier A guarantee "output cannot exhaust the supervisor": the guest writes
;; 1 GiB to stdout and every byte goes to the caller's sink as it is written, with no
;; buffer in between that grows. With a sink that keeps accepting (truncate semantics) the
;; run completes and the sink has seen exactly 1 GiB; with a sink that refuses (kill
;; semantics) the guest is stopped at that write (`quota_exceeded`, `limit = output`).
;;
;; Usage: flood.wasm
;;
;; Fills a 64 KiB buffer with 'x' and writes it to stdout 16384 times (1 GiB = 2^30 bytes),
;; counting what fd_write reports as written and writing the rest again after a short
;; write. On stderr: `done` at the end (exit 0, return from _start), or `errno=<n>` (exit
;; 1) when fd_write fails, or `stuck` (exit 2) when it reports 0 bytes or more than
;; asked.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  ;; Memory map:
  ;;   [0, 16)          fd_write ciovec (ptr, len) and nwritten, for the stderr helpers
  ;;   [16, 32)         flood ciovec (ptr, len) and nwritten
  ;;   [64, 96)         decimal digits
  ;;   [128, 512)       NUL-terminated strings
  ;;   [65536, 131072)  the 64 KiB of 'x'
  (memory (export "memory") 2)
  (data (i32.const 128) "done\n\00")
  (data (i32.const 144) "errno=\00")
  (data (i32.const 160) "stuck\n\00")
  (data (i32.const 200) "\n\00")
  (data (i32.const 224) "-\00")

  ;; Messages go to stderr (fd 2) so that stdout carries exactly the flood.
  (func $write_fd (param $fd i32) (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))

  (func $eprint (param $ptr i32) (param $len i32)
    (call $write_fd (i32.const 2) (local.get $ptr) (local.get $len)))

  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $n))

  (func $eputs (param $p i32)
    (call $eprint (local.get $p) (call $strlen (local.get $p))))

  (func $eprint_num (param $n i32)
    (local $p i32)
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then
        (call $eputs (i32.const 224))
        (local.set $n (i32.sub (i32.const 0) (local.get $n)))))
    (local.set $p (i32.const 96))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (local.get $n)))
    (call $eprint (local.get $p) (i32.sub (i32.const 96) (local.get $p))))

  (func (export "_start")
    (local $remaining i32) (local $len i32) (local $err i32) (local $n i32)
    (memory.fill (i32.const 65536) (i32.const 120) (i32.const 65536)) ;; 'x'
    (local.set $remaining (i32.const 1073741824))                     ;; 2^30
    (block $all_written
      (loop $write_more
        (br_if $all_written (i32.eqz (local.get $remaining)))
        (local.set $len
          (select (i32.const 65536) (local.get $remaining)
                  (i32.gt_u (local.get $remaining) (i32.const 65536))))
        (i32.store (i32.const 16) (i32.const 65536))
        (i32.store (i32.const 20) (local.get $len))
        (local.set $err
          (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))
        (if (local.get $err)
          (then
            (call $eputs (i32.const 144))
            (call $eprint_num (local.get $err))
            (call $eputs (i32.const 200))
            (call $proc_exit (i32.const 1))))
        (local.set $n (i32.load (i32.const 24)))
        (if (i32.or (i32.eqz (local.get $n)) (i32.gt_u (local.get $n) (local.get $len)))
          (then
            (call $eputs (i32.const 160))
            (call $proc_exit (i32.const 2))))
        (local.set $remaining (i32.sub (local.get $remaining) (local.get $n)))
        (br $write_more)))
    (call $eputs (i32.const 128)))
)
