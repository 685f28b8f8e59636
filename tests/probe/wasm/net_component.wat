;; A WASI preview 2 command component that opens one TCP connection through wasi:sockets
;; (0.2.0 imports) and prints exactly one line on stdout saying how far it got.
;;
;; Placeholders the test substitutes before compiling (every occurrence, these comments
;; included): __NAME__ the host name or IPv4 literal to look up (its bytes go in a data
;; string, so no quotes or backslashes), __NAME_LEN__ its length in bytes (decimal),
;; __PORT__ the TCP port to connect to (decimal).
;;
;; It gets the instance network, resolves __NAME__ (blocking on the stream's pollable
;; while the lookup would block), takes the first IPv4 address (IPv6 ones are skipped),
;; creates an IPv4 TCP socket, connects to that address on __PORT__ (blocking on the
;; socket's pollable while finish-connect would block), reads once (blocking-read of at
;; most 64 bytes) and prints one of:
;;   ok <bytes read>          the connection was made (the bytes end the line: the test
;;                            server sends "granted\n")
;;   lookup-error <code>\n    resolve-addresses or resolve-next-address failed
;;   lookup-empty\n           the name has no IPv4 address
;;   connect-error <code>\n   create-tcp-socket, start-connect or finish-connect failed
;;   read-error\n             the read failed (the stream closed before any byte)
;; <code> is the wasi:sockets/network error-code discriminant in decimal, without
;; padding (1 access-denied, 14 connection-refused, 18 name-unresolvable, 20
;; permanent-resolver-failure, ...). `run` returns ok in every case. Resources are not
;; dropped: the process ends anyway.
;;
;; Proves: a hand-written component importing wasi:sockets, wasi:io and wasi:cli at 0.2.0
;; links against the host's newer 0.2.x WIT, and the host's network grants (name lookup,
;; TCP, the socket address check) decide what the guest can reach.
(component
  ;; ---- types shared by several interfaces (wasi:sockets/network, wasi:io/streams) ------

  (type $error-code (enum "unknown" "access-denied" "not-supported" "invalid-argument"
    "out-of-memory" "timeout" "concurrency-conflict" "not-in-progress" "would-block"
    "invalid-state" "new-socket-limit" "address-not-bindable" "address-in-use"
    "remote-unreachable" "connection-refused" "connection-reset" "connection-aborted"
    "datagram-too-large" "name-unresolvable" "temporary-resolver-failure"
    "permanent-resolver-failure"))
  (type $ip-address-family (enum "ipv4" "ipv6"))
  (type $ipv4-address (tuple u8 u8 u8 u8))
  (type $ipv6-address (tuple u16 u16 u16 u16 u16 u16 u16 u16))
  (type $ip-address (variant (case "ipv4" $ipv4-address) (case "ipv6" $ipv6-address)))
  (type $ipv4-socket-address (record (field "port" u16) (field "address" $ipv4-address)))
  (type $ipv6-socket-address (record (field "port" u16) (field "flow-info" u32)
    (field "address" $ipv6-address) (field "scope-id" u32)))

  ;; ---- imports (only the functions used; names in types must be exported to be named) -

  (import "wasi:io/error@0.2.0" (instance $io-error
    (export "error" (type (sub resource)))))
  (alias export $io-error "error" (type $error))
  (type $stream-error (variant (case "last-operation-failed" (own $error)) (case "closed")))

  (import "wasi:io/poll@0.2.0" (instance $io-poll
    (export "pollable" (type $p (sub resource)))
    (export "[method]pollable.block" (func (param "self" (borrow $p))))))
  (alias export $io-poll "pollable" (type $pollable))

  (import "wasi:io/streams@0.2.0" (instance $io-streams
    (export "error" (type (eq $error)))
    (export "stream-error" (type $se (eq $stream-error)))
    (export "input-stream" (type $in (sub resource)))
    (export "output-stream" (type $out (sub resource)))
    (export "[method]input-stream.blocking-read"
      (func (param "self" (borrow $in)) (param "len" u64)
        (result (result (list u8) (error $se)))))
    (export "[method]output-stream.blocking-write-and-flush"
      (func (param "self" (borrow $out)) (param "contents" (list u8))
        (result (result (error $se)))))))
  (alias export $io-streams "input-stream" (type $input-stream))
  (alias export $io-streams "output-stream" (type $output-stream))

  (import "wasi:cli/stdout@0.2.0" (instance $cli-stdout
    (export "output-stream" (type $out (eq $output-stream)))
    (export "get-stdout" (func (result (own $out))))))

  (import "wasi:sockets/network@0.2.0" (instance $sockets-network
    (export "network" (type (sub resource)))))
  (alias export $sockets-network "network" (type $network))

  (import "wasi:sockets/instance-network@0.2.0" (instance $sockets-instance-network
    (export "network" (type $n (eq $network)))
    (export "instance-network" (func (result (own $n))))))

  (import "wasi:sockets/ip-name-lookup@0.2.0" (instance $sockets-ip-name-lookup
    (export "pollable" (type $p (eq $pollable)))
    (export "network" (type $n (eq $network)))
    (export "error-code" (type $ec (eq $error-code)))
    (export "ip-address" (type $ia (eq $ip-address)))
    (export "resolve-address-stream" (type $ras (sub resource)))
    (export "[method]resolve-address-stream.resolve-next-address"
      (func (param "self" (borrow $ras)) (result (result (option $ia) (error $ec)))))
    (export "[method]resolve-address-stream.subscribe"
      (func (param "self" (borrow $ras)) (result (own $p))))
    (export "resolve-addresses"
      (func (param "network" (borrow $n)) (param "name" string)
        (result (result (own $ras) (error $ec)))))))

  (import "wasi:sockets/tcp@0.2.0" (instance $sockets-tcp
    (export "input-stream" (type $in (eq $input-stream)))
    (export "output-stream" (type $out (eq $output-stream)))
    (export "pollable" (type $p (eq $pollable)))
    (export "network" (type $n (eq $network)))
    (export "error-code" (type $ec (eq $error-code)))
    ;; A variant of records must name the records through their exports.
    (export "ipv4-socket-address" (type $v4 (eq $ipv4-socket-address)))
    (export "ipv6-socket-address" (type $v6 (eq $ipv6-socket-address)))
    (type $ip-socket-address (variant (case "ipv4" $v4) (case "ipv6" $v6)))
    (export "ip-socket-address" (type $isa (eq $ip-socket-address)))
    (export "tcp-socket" (type $s (sub resource)))
    (export "[method]tcp-socket.start-connect"
      (func (param "self" (borrow $s)) (param "network" (borrow $n))
        (param "remote-address" $isa) (result (result (error $ec)))))
    (export "[method]tcp-socket.finish-connect"
      (func (param "self" (borrow $s))
        (result (result (tuple (own $in) (own $out)) (error $ec)))))
    (export "[method]tcp-socket.subscribe" (func (param "self" (borrow $s)) (result (own $p))))))
  (alias export $sockets-tcp "tcp-socket" (type $tcp-socket))

  (import "wasi:sockets/tcp-create-socket@0.2.0" (instance $sockets-tcp-create-socket
    (export "error-code" (type $ec (eq $error-code)))
    (export "ip-address-family" (type $f (eq $ip-address-family)))
    (export "tcp-socket" (type $s (eq $tcp-socket)))
    (export "create-tcp-socket"
      (func (param "address-family" $f) (result (result (own $s) (error $ec)))))))

  ;; ---- the memory and the allocator the canonical ABI lowers into ----------------------

  ;; A separate module, instantiated first: the lowered imports need the memory before
  ;; the main module (which imports them) exists.
  (core module $Memory
    (memory (export "memory") 1)
    ;; The heap: from 8192 to the end of the single page (the host allocates only the
    ;; read's bytes, at most 64).
    (global $heap (mut i32) (i32.const 8192))
    ;; A bump allocator: never frees; a reallocation copies the old bytes.
    (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32)
      (param $new_size i32) (result i32)
      (local $p i32)
      (local.set $p
        (i32.and
          (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get $align))))
      (global.set $heap (i32.add (local.get $p) (local.get $new_size)))
      (memory.copy (local.get $p) (local.get $old) (local.get $old_size))
      (local.get $p)))
  (core instance $memory (instantiate $Memory))
  (alias core export $memory "memory" (core memory $mem))
  (alias core export $memory "cabi_realloc" (core func $realloc))

  ;; ---- the lowered imports -------------------------------------------------------------

  (core func $block (canon lower (func $io-poll "[method]pollable.block")))
  (core func $get-stdout (canon lower (func $cli-stdout "get-stdout")))
  (core func $write
    (canon lower (func $io-streams "[method]output-stream.blocking-write-and-flush")
      (memory $mem)))
  (core func $read
    (canon lower (func $io-streams "[method]input-stream.blocking-read")
      (memory $mem) (realloc $realloc)))
  (core func $instance-network
    (canon lower (func $sockets-instance-network "instance-network")))
  (core func $resolve-addresses
    (canon lower (func $sockets-ip-name-lookup "resolve-addresses") (memory $mem)))
  (core func $resolve-next-address
    (canon lower
      (func $sockets-ip-name-lookup "[method]resolve-address-stream.resolve-next-address")
      (memory $mem)))
  (core func $subscribe-lookup
    (canon lower (func $sockets-ip-name-lookup "[method]resolve-address-stream.subscribe")))
  (core func $create-tcp-socket
    (canon lower (func $sockets-tcp-create-socket "create-tcp-socket") (memory $mem)))
  (core func $start-connect
    (canon lower (func $sockets-tcp "[method]tcp-socket.start-connect") (memory $mem)))
  (core func $finish-connect
    (canon lower (func $sockets-tcp "[method]tcp-socket.finish-connect") (memory $mem)))
  (core func $subscribe-socket
    (canon lower (func $sockets-tcp "[method]tcp-socket.subscribe")))

  ;; ---- the guest -----------------------------------------------------------------------

  (core module $Main
    (import "env" "memory" (memory 1))
    (import "wasi" "block" (func $block (param i32)))
    (import "wasi" "get-stdout" (func $get-stdout (result i32)))
    (import "wasi" "write" (func $write (param i32 i32 i32 i32)))
    (import "wasi" "read" (func $read (param i32 i64 i32)))
    (import "wasi" "instance-network" (func $instance-network (result i32)))
    (import "wasi" "resolve-addresses" (func $resolve-addresses (param i32 i32 i32 i32)))
    (import "wasi" "resolve-next-address" (func $resolve-next-address (param i32 i32)))
    (import "wasi" "subscribe-lookup" (func $subscribe-lookup (param i32) (result i32)))
    (import "wasi" "create-tcp-socket" (func $create-tcp-socket (param i32 i32)))
    ;; self, network, ip-socket-address flattened (case, then 11 payload slots: an ipv4
    ;; address fills port, a, b, c, d and leaves 6 zeros), return pointer.
    (import "wasi" "start-connect" (func $start-connect
      (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)))
    (import "wasi" "finish-connect" (func $finish-connect (param i32 i32)))
    (import "wasi" "subscribe-socket" (func $subscribe-socket (param i32) (result i32)))

    ;; Memory map (results written through a return pointer: case byte, payload at the
    ;; payload's alignment):
    ;;   [0, 8)       resolve-addresses: case @0, stream or error-code @4
    ;;   [16, 38)     resolve-next-address: case @16, option case or error-code @18,
    ;;                ip-address case @20, ipv4 bytes a b c d @22..26
    ;;   [48, 56)     create-tcp-socket: case @48, socket or error-code @52
    ;;   [56, 58)     start-connect: case @56, error-code @57
    ;;   [64, 76)     finish-connect: case @64, input-stream or error-code @68,
    ;;                output-stream @72
    ;;   [80, 92)     blocking-read: case @80, bytes pointer @84, length @88
    ;;   [96, 108)    blocking-write-and-flush (ignored)
    ;;   [128, 264)   strings
    ;;   [512, 600)   the line being printed
    ;;   [1024, ...)  the name to resolve
    ;;   [8192, end)  the allocator's heap (module $Memory)
    (data (i32.const 128) "lookup-error ")
    (data (i32.const 160) "connect-error ")
    (data (i32.const 192) "lookup-empty\n")
    (data (i32.const 224) "read-error\n")
    (data (i32.const 256) "ok ")
    (data (i32.const 1024) "__NAME__")

    (func $print (param $ptr i32) (param $len i32)
      (call $write (call $get-stdout) (local.get $ptr) (local.get $len) (i32.const 96)))

    ;; Prints the `len` bytes at `ptr`, `code` in decimal (0..=99) and a newline.
    (func $fail (param $ptr i32) (param $len i32) (param $code i32)
      (local $end i32)
      (memory.copy (i32.const 512) (local.get $ptr) (local.get $len))
      (local.set $end (i32.add (i32.const 512) (local.get $len)))
      (if (i32.ge_u (local.get $code) (i32.const 10))
        (then
          (i32.store8 (local.get $end)
            (i32.add (i32.const 48) (i32.div_u (local.get $code) (i32.const 10))))
          (local.set $end (i32.add (local.get $end) (i32.const 1)))))
      (i32.store8 (local.get $end)
        (i32.add (i32.const 48) (i32.rem_u (local.get $code) (i32.const 10))))
      (i32.store8 offset=1 (local.get $end) (i32.const 10))
      (call $print (i32.const 512) (i32.sub (local.get $end) (i32.const 510))))

    (func (export "run") (result i32)
      (local $net i32)
      (local $stream i32)
      (local $sock i32)
      (local.set $net (call $instance-network))

      ;; Resolve the name; wait while the lookup would block (error-code 8).
      (call $resolve-addresses
        (local.get $net) (i32.const 1024) (i32.const __NAME_LEN__) (i32.const 0))
      (if (i32.load8_u (i32.const 0))
        (then
          (call $fail (i32.const 128) (i32.const 13) (i32.load8_u (i32.const 4)))
          (return (i32.const 0))))
      (local.set $stream (i32.load (i32.const 4)))
      (loop $next
        (call $resolve-next-address (local.get $stream) (i32.const 16))
        (if (i32.load8_u (i32.const 16))
          (then
            (if (i32.eq (i32.load8_u (i32.const 18)) (i32.const 8))
              (then
                (call $block (call $subscribe-lookup (local.get $stream)))
                (br $next)))
            (call $fail (i32.const 128) (i32.const 13) (i32.load8_u (i32.const 18)))
            (return (i32.const 0))))
        (if (i32.eqz (i32.load8_u (i32.const 18)))
          (then
            (call $print (i32.const 192) (i32.const 13))
            (return (i32.const 0))))
        ;; An ipv6 address: take the next one.
        (br_if $next (i32.load8_u (i32.const 20))))

      ;; Connect to the first IPv4 address; wait while the connection would block.
      (call $create-tcp-socket (i32.const 0) (i32.const 48))
      (if (i32.load8_u (i32.const 48))
        (then
          (call $fail (i32.const 160) (i32.const 14) (i32.load8_u (i32.const 52)))
          (return (i32.const 0))))
      (local.set $sock (i32.load (i32.const 52)))
      (call $start-connect (local.get $sock) (local.get $net)
        (i32.const 0) (i32.const __PORT__)
        (i32.load8_u (i32.const 22)) (i32.load8_u (i32.const 23))
        (i32.load8_u (i32.const 24)) (i32.load8_u (i32.const 25))
        (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
        (i32.const 56))
      (if (i32.load8_u (i32.const 56))
        (then
          (call $fail (i32.const 160) (i32.const 14) (i32.load8_u (i32.const 57)))
          (return (i32.const 0))))
      (loop $wait
        (call $finish-connect (local.get $sock) (i32.const 64))
        (if (i32.load8_u (i32.const 64))
          (then
            (if (i32.eq (i32.load8_u (i32.const 68)) (i32.const 8))
              (then
                (call $block (call $subscribe-socket (local.get $sock)))
                (br $wait)))
            (call $fail (i32.const 160) (i32.const 14) (i32.load8_u (i32.const 68)))
            (return (i32.const 0)))))

      ;; Read once and print "ok " and the bytes.
      (call $read (i32.load (i32.const 68)) (i64.const 64) (i32.const 80))
      (if (i32.load8_u (i32.const 80))
        (then
          (call $print (i32.const 224) (i32.const 11))
          (return (i32.const 0))))
      (memory.copy (i32.const 512) (i32.const 256) (i32.const 3))
      (memory.copy (i32.const 515) (i32.load (i32.const 84)) (i32.load (i32.const 88)))
      (call $print (i32.const 512) (i32.add (i32.const 3) (i32.load (i32.const 88))))
      (i32.const 0)))

  (core instance $main (instantiate $Main
    (with "env" (instance $memory))
    (with "wasi" (instance
      (export "block" (func $block))
      (export "get-stdout" (func $get-stdout))
      (export "write" (func $write))
      (export "read" (func $read))
      (export "instance-network" (func $instance-network))
      (export "resolve-addresses" (func $resolve-addresses))
      (export "resolve-next-address" (func $resolve-next-address))
      (export "subscribe-lookup" (func $subscribe-lookup))
      (export "create-tcp-socket" (func $create-tcp-socket))
      (export "start-connect" (func $start-connect))
      (export "finish-connect" (func $finish-connect))
      (export "subscribe-socket" (func $subscribe-socket))))))

  (func $run (result (result)) (canon lift (core func $main "run")))
  (instance $cli (export "run" (func $run)))
  (export "wasi:cli/run@0.2.0" (instance $cli)))
