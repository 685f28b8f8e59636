#!/usr/bin/env python3
"""Minimal CONNECT relays of three designs, for bench/egress.sh (EGRESS_BENCH_RELAYS=1):
how fast can any relay on this machine be, next to the Tierbox proxy, in the same run?

    relay_designs.py copy|splice|sockmap     (prints "ready PORT" once listening)

- copy:    two threads, recv/send with a 256 KiB buffer (the classic user-space relay);
- splice:  two threads, socket -> pipe (1 MiB) -> socket with splice(2): no copy through
           user space;
- sockmap: the data path stays in the kernel: both sockets go into a BPF sockmap whose
           stream-verdict program redirects every segment to the other socket's egress.
           A measurement prototype only: it closes both sockets when either side ends,
           without waiting for redirected data still queued in the kernel, so a fetch can
           come up short (egress.sh counts complete fetches only).

One tunnel at a time, no allowlist, no logging: a floor to compare with, not a proxy.
Needs root for sockmap (BPF).
"""
import ctypes
import fcntl
import os
import select
import socket
import struct
import sys
import threading
import time

MODE = sys.argv[1]
BUFFER = 256 * 1024
PIPE_BYTES = 1 << 20
F_SETPIPE_SZ = 1031


def sockmap_setup(port):
    """A 2-entry sockmap (0: client, 1: destination) with its verdict program attached."""
    libc = ctypes.CDLL(None, use_errno=True)
    sys_bpf = 321 if os.uname().machine == "x86_64" else 280

    def bpf(cmd, attr):
        buf = ctypes.create_string_buffer(attr, 128)
        fd = libc.syscall(sys_bpf, cmd, buf, 128)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def insn(code, dst=0, src=0, off=0, imm=0):
        return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)

    map_fd = bpf(0, struct.pack("<IIIII", 15, 4, 4, 2, 0))  # MAP_CREATE, SOCKMAP
    program = b"".join([
        insn(0xBF, 6, 1),               # r6 = skb
        insn(0x61, 2, 1, 136),          # r2 = skb->local_port (host order)
        insn(0x55, 2, 0, 2, port),      # if r2 != port: skip 2
        insn(0xB7, 3, 0, 0, 1),         # r3 = 1: from the client, to the destination
        insn(0x05, 0, 0, 1),            # skip 1
        insn(0xB7, 3, 0, 0, 0),         # r3 = 0: from the destination, to the client
        insn(0xBF, 1, 6),               # r1 = skb
        insn(0x18, 2, 1, 0, map_fd),    # r2 = the map (ld_imm64, pseudo map fd)
        insn(0),
        insn(0xB7, 4, 0, 0, 0),         # r4 = 0: the other socket's egress
        insn(0x85, 0, 0, 0, 52),        # bpf_sk_redirect_map
        insn(0x95),                     # exit
    ])
    insns = ctypes.create_string_buffer(program, len(program))
    license_ = ctypes.create_string_buffer(b"GPL")
    prog_fd = bpf(5, struct.pack(  # PROG_LOAD, SK_SKB, expected: STREAM_VERDICT
        "<IIQQIIQII16sII", 14, len(program) // 8, ctypes.addressof(insns),
        ctypes.addressof(license_), 0, 0, 0, 0, 0, b"relay", 0, 5))
    bpf(8, struct.pack("<IIIII", map_fd, prog_fd, 5, 0, 0))  # PROG_ATTACH to the map

    def put(key, fd):
        k, v = ctypes.c_uint32(key), ctypes.c_uint32(fd)
        bpf(2, struct.pack("<IIQQQ", map_fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0))

    return put


def pump_copy(src, dst):
    while data := src.recv(BUFFER):
        dst.sendall(data)
    dst.shutdown(socket.SHUT_WR)


def pump_splice(src, dst):
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_BYTES)
    while n := os.splice(src.fileno(), w, PIPE_BYTES):
        while n:
            n -= os.splice(r, dst.fileno(), n)
    dst.shutdown(socket.SHUT_WR)
    os.close(r)
    os.close(w)


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
port = listener.getsockname()[1]
put = sockmap_setup(port) if MODE == "sockmap" else None
print(f"ready {port}", flush=True)
while True:
    client, _ = listener.accept()
    head = b""
    while b"\r\n\r\n" not in head:
        head += client.recv(4096)
    host, port = head.split()[1].decode().rsplit(":", 1)
    dest = socket.create_connection((host, int(port)))
    if put is not None:
        # Both in the map before the client may send anything through the tunnel.
        put(0, client.fileno())
        put(1, dest.fileno())
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        select.select([client, dest], [], [])  # only an end of stream reaches us
        time.sleep(0.01)
    else:
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pump = pump_splice if MODE == "splice" else pump_copy
        down = threading.Thread(target=pump, args=(dest, client))
        down.start()
        pump(client, dest)
        down.join()
    client.close()
    dest.close()
