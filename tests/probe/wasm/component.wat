;; A WASI preview 2 command component. Its `wasi:cli/run` export lifts the core module's
;; `run`, whose body the test substitutes for RESULT_BODY: `i32.const 0` (ok), `i32.const 1`
;; (error) or an endless loop.
;;
;; Proves: components run in Tier A through the preview 2 path (`kind == "component"`), an
;; error result is exit code 1, and the deadline and the fuel budget stop a component as
;; they stop a module.
(component
  (core module $m
    (func (export "run") (result i32)
      RESULT_BODY))
  (core instance $i (instantiate $m))
  (func $run (result (result)) (canon lift (core func $i "run")))
  (instance $cli (export "run" (func $run)))
  (export "wasi:cli/run@0.2.0" (instance $cli)))
