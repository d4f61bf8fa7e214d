#!/usr/bin/env python3
"""Holds locked and pinned memory until stdin closes, for the end-to-end alert checks.

    memlock_holder.py LOCK_BYTES PIN_BYTES

mlock()s LOCK_BYTES (VmLck) and registers PIN_BYTES as io_uring fixed buffers, which the kernel
charges to VmPin and checks against RLIMIT_MEMLOCK like an RDMA registration. Prints "ready"
once both are held, then waits. Run it unprivileged (without CAP_IPC_LOCK) so the limit applies.
"""

import ctypes
import mmap
import os
import sys

SYS_IO_URING_SETUP = 425
SYS_IO_URING_REGISTER = 427
IORING_REGISTER_BUFFERS = 0


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def address(buffer):
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def main():
    lock_bytes, pin_bytes = int(sys.argv[1]), int(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    held = []
    if lock_bytes:
        locked = mmap.mmap(-1, lock_bytes)
        if libc.mlock(ctypes.c_void_p(address(locked)), ctypes.c_size_t(lock_bytes)) != 0:
            sys.exit(f"mlock({lock_bytes}): {os.strerror(ctypes.get_errno())}")
        held.append(locked)
    if pin_bytes:
        params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
        ring = libc.syscall(SYS_IO_URING_SETUP, 4, params)
        if ring < 0:
            sys.exit(f"io_uring_setup: {os.strerror(ctypes.get_errno())}")
        pinned = mmap.mmap(-1, pin_bytes)
        iov = Iovec(address(pinned), pin_bytes)
        if libc.syscall(SYS_IO_URING_REGISTER, ring, IORING_REGISTER_BUFFERS, ctypes.byref(iov), 1) < 0:
            sys.exit(f"io_uring_register({pin_bytes}): {os.strerror(ctypes.get_errno())}")
        held.append((ring, pinned, iov))
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
