;; net.wat: Tier A guarantee "no network without a grant (and Tier A grants none)": the
;; guest has no socket descriptor, so every socket call fails, whatever fd it tries. WASI
;; preview 1 cannot create sockets; it can only use sockets the host preopens, and Tier A
;; preopens none.
;;
;; Usage: net.wasm
;;
;; For each fd from 0 to 10 (stdio, the preopened directories, and fds that are not open)
;; calls sock_accept, sock_send (5 bytes), sock_recv (into 16 bytes) and sock_shutdown
;; (both directions), and prints one line per fd:
;;   fd=<fd> accept=<errno> send=<errno> recv=<errno> shutdown=<errno>
;; Expected errnos: 8 (EBADF) for fds that are not open, 57 (ENOTSOCK) for open fds that
;; are not sockets. The exit code is the number of calls that succeeded (0 when the
;; guarantee holds).
(module
  (import "wasi_snapshot_preview1" "sock_accept"
    (func $sock_accept (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_send"
    (func $sock_send (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_recv"
    (func $sock_recv (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_shutdown"
    (func $sock_shutdown (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  ;; Memory map:
  ;;   [0, 16)          fd_write ciovec (ptr, len) and nwritten
  ;;   [16, 32)         results: accepted fd, bytes sent/received, roflags
  ;;   [32, 40)         sock_send ciovec -> "hello" at 256
  ;;   [40, 48)         sock_recv iovec -> 16 bytes at 272
  ;;   [64, 96)         decimal digits
  ;;   [128, 512)       NUL-terminated strings and data
  (memory (export "memory") 1)
  (data (i32.const 128) "fd=\00")
  (data (i32.const 136) " accept=\00")
  (data (i32.const 152) " send=\00")
  (data (i32.const 168) " recv=\00")
  (data (i32.const 184) " shutdown=\00")
  (data (i32.const 200) "\n\00")
  (data (i32.const 224) "-\00")
  (data (i32.const 256) "hello")

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

  (global $successes (mut i32) (i32.const 0))

  ;; Prints " <label><errno>" and counts a success (errno 0).
  (func $report (param $label i32) (param $errno i32)
    (call $puts (local.get $label))
    (call $print_num (local.get $errno))
    (if (i32.eqz (local.get $errno))
      (then (global.set $successes (i32.add (global.get $successes) (i32.const 1))))))

  (func (export "_start")
    (local $fd i32)
    (i32.store (i32.const 32) (i32.const 256))
    (i32.store (i32.const 36) (i32.const 5))
    (i32.store (i32.const 40) (i32.const 272))
    (i32.store (i32.const 44) (i32.const 16))
    (block $done
      (loop $each_fd
        (br_if $done (i32.gt_u (local.get $fd) (i32.const 10)))
        (call $puts (i32.const 128))
        (call $print_num (local.get $fd))
        ;; sock_accept(fd, flags = 0, &new_fd)
        (call $report (i32.const 136)
          (call $sock_accept (local.get $fd) (i32.const 0) (i32.const 16)))
        ;; sock_send(fd, ciovecs, 1, flags = 0, &sent)
        (call $report (i32.const 152)
          (call $sock_send (local.get $fd) (i32.const 32) (i32.const 1) (i32.const 0)
            (i32.const 20)))
        ;; sock_recv(fd, iovecs, 1, flags = 0, &received, &roflags)
        (call $report (i32.const 168)
          (call $sock_recv (local.get $fd) (i32.const 40) (i32.const 1) (i32.const 0)
            (i32.const 20) (i32.const 24)))
        ;; sock_shutdown(fd, rd|wr)
        (call $report (i32.const 184)
          (call $sock_shutdown (local.get $fd) (i32.const 3)))
        (call $puts (i32.const 200))
        (local.set $fd (i32.add (local.get $fd) (i32.const 1)))
        (br $each_fd)))
    (call $proc_exit (global.get $successes)))
)
