;; open_outside.wat: Tier A guarantee "a guest cannot open anything outside its preopened
;; directories": not through `..`, not through an absolute host path, not through a
;; symlink inside a preopen that points outside it.
;;
;; Usage: open_outside.wasm PATH
;;
;; PATH is resolved the way wasi-libc resolves it, so the host sees what a real program
;; would send:
;;   - an absolute path goes to the preopen whose name is its longest prefix, and the rest
;;     is opened relative to that preopen (`/workspace/../x` -> fd of `/workspace`, `../x`);
;;   - a relative path goes to the preopen named `.`;
;;   - an absolute path no preopen covers (`/etc/passwd`) is passed unchanged to fd 3, so
;;     that the host, not this guest, has to refuse it.
;; The file is opened read-only (rights = fd_read), following symlinks.
;;
;; Prints exactly one line on stdout and exits:
;;   dirfd=<fd> errno=<n>          exit 1  the host refused the open (the guarantee holds)
;;   dirfd=<fd> ok <first bytes>   exit 0  the file was opened; up to 16 bytes of it follow
;;   dirfd=<fd> ok read-errno=<n>  exit 3  opened but not readable
;;   usage                         exit 2  no PATH given
(module
  (import "wasi_snapshot_preview1" "args_sizes_get"
    (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get"
    (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get"
    (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name"
    (func $fd_prestat_dir_name (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  ;; Memory map:
  ;;   [0, 16)          fd_write ciovec (ptr, len) and nwritten
  ;;   [16, 32)         argc, argv_buf_size, opened fd, nread
  ;;   [32, 40)         fd_read iovec (ptr, len)
  ;;   [40, 48)         prestat (tag u8 at 40, name length u32 at 44)
  ;;   [64, 96)         decimal digits
  ;;   [128, 512)       NUL-terminated strings
  ;;   [1024, 2048)     argv pointers (at most 256)
  ;;   [2048, 6144)     argv bytes (at most 4096)
  ;;   [8192, 12288)    name of the preopen being examined
  ;;   [12288, 12304)   bytes read from the file
  (memory (export "memory") 1)
  (data (i32.const 128) "dirfd=\00")
  (data (i32.const 144) " errno=\00")
  (data (i32.const 160) " ok \00")
  (data (i32.const 176) " ok read-errno=\00")
  (data (i32.const 200) "\n\00")
  (data (i32.const 208) "usage\n\00")
  (data (i32.const 224) "-\00")
  (data (i32.const 232) ".\00")

  ;; Where $resolve sends the open: directory fd and path relative to it.
  (global $dirfd (mut i32) (i32.const 3))
  (global $rel_ptr (mut i32) (i32.const 0))
  (global $rel_len (mut i32) (i32.const 0))

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

  ;; ---- argv[1] and wasi-libc-like path resolution ------------------------------------

  (func $usage
    (call $puts (i32.const 208))
    (call $proc_exit (i32.const 2)))

  ;; Pointer to the NUL-terminated argv[1]; exits 2 without it.
  (func $argv1 (result i32)
    (if (call $args_sizes_get (i32.const 16) (i32.const 20)) (then (call $usage)))
    (if (i32.lt_u (i32.load (i32.const 16)) (i32.const 2)) (then (call $usage)))
    (if (i32.gt_u (i32.load (i32.const 16)) (i32.const 256)) (then (call $usage)))
    (if (i32.gt_u (i32.load (i32.const 20)) (i32.const 4096)) (then (call $usage)))
    (if (call $args_get (i32.const 1024) (i32.const 2048)) (then (call $usage)))
    (i32.load (i32.const 1028)))

  (func $memeq (param $a i32) (param $b i32) (param $n i32) (result i32)
    (block $differ
      (loop $next
        (if (i32.eqz (local.get $n)) (then (return (i32.const 1))))
        (br_if $differ (i32.ne (i32.load8_u (local.get $a)) (i32.load8_u (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  ;; Sets $dirfd / $rel_ptr / $rel_len for the NUL-terminated path at $path (see header).
  (func $resolve (param $path i32) (param $len i32)
    (local $abs i32) (local $fd i32) (local $nlen i32)
    (local $best_fd i32) (local $best_len i32) (local $dot_fd i32)
    (local.set $best_fd (i32.const -1))
    (local.set $dot_fd (i32.const -1))
    (local.set $abs (i32.eq (i32.load8_u (local.get $path)) (i32.const 47))) ;; '/'
    ;; Preopens are fds 3, 4, ...: fd_prestat_get fails (EBADF) after the last one.
    (local.set $fd (i32.const 3))
    (block $no_more
      (loop $each_preopen
        (br_if $no_more (call $fd_prestat_get (local.get $fd) (i32.const 40)))
        (local.set $nlen (i32.load (i32.const 44)))
        (if (i32.and
              (i32.and (i32.eqz (i32.load8_u (i32.const 40)))           ;; a directory
                       (i32.gt_u (local.get $nlen) (i32.const 0)))
              (i32.le_u (local.get $nlen) (i32.const 4096)))
          (then
            (if (i32.eqz (call $fd_prestat_dir_name
                           (local.get $fd) (i32.const 8192) (local.get $nlen)))
              (then
                ;; Absolute: the name is a prefix of the path, ending at a '/' or at its end.
                (if (i32.and
                      (i32.and (local.get $abs)
                               (i32.gt_u (local.get $nlen) (local.get $best_len)))
                      (i32.le_u (local.get $nlen) (local.get $len)))
                  (then
                    (if (i32.and
                          (call $memeq (local.get $path) (i32.const 8192) (local.get $nlen))
                          (i32.or
                            (i32.eq (local.get $nlen) (local.get $len))
                            (i32.eq (i32.load8_u (i32.add (local.get $path) (local.get $nlen)))
                                    (i32.const 47))))
                      (then
                        (local.set $best_fd (local.get $fd))
                        (local.set $best_len (local.get $nlen))))))
                ;; Relative: remember the first preopen named ".".
                (if (i32.and
                      (i32.and (i32.eq (local.get $nlen) (i32.const 1))
                               (i32.eq (i32.load8_u (i32.const 8192)) (i32.const 46)))
                      (i32.lt_s (local.get $dot_fd) (i32.const 0)))
                  (then (local.set $dot_fd (local.get $fd))))))))
        (local.set $fd (i32.add (local.get $fd) (i32.const 1)))
        (br $each_preopen)))
    (global.set $dirfd (i32.const 3))
    (if (local.get $abs)
      (then
        (if (i32.ge_s (local.get $best_fd) (i32.const 0))
          (then
            (global.set $dirfd (local.get $best_fd))
            (local.set $path (i32.add (local.get $path) (local.get $best_len)))
            (local.set $len (i32.sub (local.get $len) (local.get $best_len)))
            (block $slashes_done
              (loop $skip_slash
                (br_if $slashes_done (i32.eqz (local.get $len)))
                (br_if $slashes_done
                  (i32.ne (i32.load8_u (local.get $path)) (i32.const 47)))
                (local.set $path (i32.add (local.get $path) (i32.const 1)))
                (local.set $len (i32.sub (local.get $len) (i32.const 1)))
                (br $skip_slash)))
            (if (i32.eqz (local.get $len))
              (then
                (local.set $path (i32.const 232))
                (local.set $len (i32.const 1)))))))
      (else
        (if (i32.ge_s (local.get $dot_fd) (i32.const 0))
          (then (global.set $dirfd (local.get $dot_fd))))))
    (global.set $rel_ptr (local.get $path))
    (global.set $rel_len (local.get $len)))

  ;; ---- the probe ----------------------------------------------------------------------

  (func (export "_start")
    (local $path i32) (local $err i32)
    (local.set $path (call $argv1))
    (call $resolve (local.get $path) (call $strlen (local.get $path)))
    (call $puts (i32.const 128))
    (call $print_num (global.get $dirfd))
    ;; path_open(dirfd, lookup = symlink_follow, path, oflags = 0,
    ;;           rights = fd_read, inheriting = 0, fdflags = 0, &fd)
    (local.set $err
      (call $path_open (global.get $dirfd) (i32.const 1)
        (global.get $rel_ptr) (global.get $rel_len)
        (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 24)))
    (if (local.get $err)
      (then
        (call $puts (i32.const 144))
        (call $print_num (local.get $err))
        (call $puts (i32.const 200))
        (call $proc_exit (i32.const 1))))
    (i32.store (i32.const 32) (i32.const 12288))
    (i32.store (i32.const 36) (i32.const 16))
    (local.set $err
      (call $fd_read (i32.load (i32.const 24)) (i32.const 32) (i32.const 1) (i32.const 28)))
    (if (local.get $err)
      (then
        (call $puts (i32.const 176))
        (call $print_num (local.get $err))
        (call $puts (i32.const 200))
        (call $proc_exit (i32.const 3))))
    (call $puts (i32.const 160))
    (call $print (i32.const 12288) (i32.load (i32.const 28)))
    (call $puts (i32.const 200))
    (call $proc_exit (i32.const 0)))
)
