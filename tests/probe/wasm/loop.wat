;; loop.wat: Tier A guarantee "a guest that never stops is stopped": by the wall-clock
;; deadline (the run reports `timed_out` and `limit = wall_time`) or, under a small budget,
;; by fuel (`limit = fuel`), whichever comes first. No host call is made inside the loop,
;; so only the engine's own interruption (epoch deadline, fuel) can end it.
;;
;; Usage: loop.wasm
;;
;; Prints `looping` (proof that it started), then spins in `loop { br loop }` forever. The
;; `proc_exit(99)` after the loop is unreachable; exit code 99 would mean the loop ended.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  ;; [0, 12): fd_write ciovec and nwritten; [16, 24): "looping\n".
  (memory (export "memory") 1)
  (data (i32.const 16) "looping\n")

  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 8))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (loop $forever
      (br $forever))
    (call $proc_exit (i32.const 99)))
)
