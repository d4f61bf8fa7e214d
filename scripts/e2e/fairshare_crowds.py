#!/usr/bin/env python3
"""Crowds and holders for scripts/e2e/fairshare.sh (issue 33), with real mlock (VmLck). Run it
unprivileged (no CAP_IPC_LOCK) under an 8 MiB memlock limit.

    fairshare_crowds.py memfd N     N forked processes that mlock the same 8 MiB memfd, then set their
                                    soft limit to the 8 MiB they hold (ratio 1 each, 8 MiB on the host
                                    in all); prints "memfd ready" and holds until stdin closes
    fairshare_crowds.py hold KIB    one process that mlocks KIB and holds until stdin closes ("held")
    fairshare_crowds.py leader KIB  mlocks KIB, then its main thread exits while another thread holds
                                    on until stdin closes (prints "leader exited TID")

Every process names itself (PR_SET_NAME) after its mode: crowd-memfd, job-hold, leader-exit.
"""

import ctypes
import mmap
import os
import resource
import sys
import threading

PR_SET_NAME = 15
MIB = 1 << 20
libc = ctypes.CDLL(None, use_errno=True)


def name(comm):
    libc.prctl(PR_SET_NAME, comm.encode()[:15], 0, 0, 0)


def lock(buffer, size):
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    if libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) != 0:
        sys.exit(f"mlock({size}): {os.strerror(ctypes.get_errno())}")


def memfd(count):
    name("crowd-memfd")
    size = 8 * MIB
    fd = os.memfd_create("crowd")
    os.ftruncate(fd, size)
    ready_r, ready_w = os.pipe()
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            shared = mmap.mmap(fd, size, mmap.MAP_SHARED)
            lock(shared, size)
            # Lowered to what it holds: the kernel does not re-check, VmLck / limit is 1.
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (size, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))
            os.write(ready_w, b"x")
            # Holds until the parent goes (stdin closed): the pipe's other end is the parent's.
            sys.stdin.read()
            os._exit(0)
        children.append(pid)
    os.close(ready_w)
    got = 0
    while got < count:
        chunk = os.read(ready_r, count - got)
        if not chunk:
            sys.exit("a crowd member failed")
        got += len(chunk)
    print("memfd ready", flush=True)
    sys.stdin.read()
    for pid in children:
        os.waitpid(pid, 0)
    print("done", flush=True)


def hold(kib):
    name("job-hold")
    size = kib << 10
    buffer = mmap.mmap(-1, size)
    lock(buffer, size)
    print("held", flush=True)
    sys.stdin.read()


def leader(kib):
    name("leader-exit")
    size = kib << 10
    buffer = mmap.mmap(-1, size)
    lock(buffer, size)

    def hold_on():
        print("leader exited", threading.get_native_id(), flush=True)
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=hold_on).start()
    # SYS_exit ends this thread only: the leader becomes a zombie without an mm.
    libc.syscall({"x86_64": 60, "aarch64": 93}[os.uname().machine], 0)


def main():
    mode, arg = sys.argv[1], int(sys.argv[2])
    {"memfd": memfd, "hold": hold, "leader": leader}[mode](arg)


if __name__ == "__main__":
    main()
