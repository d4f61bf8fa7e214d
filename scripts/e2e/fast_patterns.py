#!/usr/bin/env python3
"""Memory patterns for the fast path's end-to-end checks (scripts/e2e/fast_alert.sh), with real
io_uring registered buffers (charged to VmPin and checked against RLIMIT_MEMLOCK like an RDMA
registration, io_uring/rsrc.c) and real mlock (VmLck). Run it unprivileged (no CAP_IPC_LOCK) under
an 8 MiB soft memlock limit, one uid per pattern: io_uring checks the user's locked_vm.

    fast_patterns.py step|burst|held|cycles|registrants   healthy patterns that must page nothing
    fast_patterns.py crowd N          N processes, each mlocking 64 KiB, then lowering its own soft
                                      limit to 4 KiB (ratio 16), until stdin closes (issue 24 item 1)
    fast_patterns.py lowered          one such process, until its parent goes (started in a cgroup of
                                      its own, one per crowd member: the cgroup variant of item 1)
    fast_patterns.py churn RATE SECS  RATE such processes a second, each living 0.5 s, for SECS
                                      (issue 24 item 10)

Healthy patterns (issue 23 item 1), each under 8 MiB and far from refused:
    step         1 MiB, 10 s later one step of 2 MiB, flat (37.5 %)
    burst        1 MiB, 10 s later four steps of 0.5 MiB within one second, flat (37.5 %)
    held         4 MiB, 10 s later one step of 1 MiB, flat (62.5 %, above the pages' level)
    cycles       2 MiB held; ten times: register 3 MiB, hold 2 s, deregister, wait 1 s (up to 62.5 %)
    registrants  30 s of short-lived processes: a new one every 0.5 s registers 1 MiB, lives 1.5 s

Prints one line per change ("step N MiB", "ready", "done"); every process names itself
(PR_SET_NAME) "healthy-<pattern>" so that the check can tell its alerts apart.
"""

import ctypes
import mmap
import os
import resource
import signal
import sys
import time

SYS_IO_URING_SETUP = 425
SYS_IO_URING_REGISTER = 427
IORING_REGISTER_BUFFERS = 0
PR_SET_NAME = 15
MIB = 1 << 20
HOLD = 30

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def name(comm):
    libc.prctl(PR_SET_NAME, comm.encode()[:15], 0, 0, 0)


def say(text):
    print(text, flush=True)


def register(size):
    """A ring with one registered buffer of `size` bytes; closing the ring deregisters it."""
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    ring = libc.syscall(SYS_IO_URING_SETUP, 4, params)
    if ring < 0:
        sys.exit(f"io_uring_setup: {os.strerror(ctypes.get_errno())}")
    buffer = mmap.mmap(-1, size)
    iov = Iovec(ctypes.addressof(ctypes.c_char.from_buffer(buffer)), size)
    if libc.syscall(SYS_IO_URING_REGISTER, ring, IORING_REGISTER_BUFFERS, ctypes.byref(iov), 1) < 0:
        sys.exit(f"io_uring_register({size}): {os.strerror(ctypes.get_errno())}")
    return ring, buffer, iov


def release(held):
    ring, buffer, iov = held
    os.close(ring)
    del iov
    buffer.close()


def over_lowered_limit():
    """mlock 64 KiB, then lower the own soft limit to 4 KiB: the kernel does not re-check."""
    locked = mmap.mmap(-1, 64 << 10)
    if libc.mlock(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(locked))), ctypes.c_size_t(64 << 10)):
        os._exit(1)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (4096, hard))
    return locked


def healthy(pattern):
    name(f"healthy-{pattern}")
    held = []
    if pattern == "step":
        held.append(register(1 * MIB))
        say("step 1 MiB")
        time.sleep(10)
        held.append(register(2 * MIB))
        say("step 3 MiB")
        time.sleep(HOLD)
    elif pattern == "burst":
        held.append(register(1 * MIB))
        say("step 1 MiB")
        time.sleep(10)
        for i in range(4):
            held.append(register(MIB // 2))
            say(f"step {1 + (i + 1) / 2} MiB")
            time.sleep(0.25)
        time.sleep(HOLD)
    elif pattern == "held":
        held.append(register(4 * MIB))
        say("step 4 MiB")
        time.sleep(10)
        held.append(register(1 * MIB))
        say("step 5 MiB")
        time.sleep(HOLD)
    elif pattern == "cycles":
        held.append(register(2 * MIB))
        say("step 2 MiB")
        time.sleep(5)
        for _ in range(10):
            cycle = register(3 * MIB)
            say("step 5 MiB")
            time.sleep(2)
            release(cycle)
            say("step 2 MiB")
            time.sleep(1)
        time.sleep(5)
    elif pattern == "registrants":
        children = []
        end = time.time() + 30
        while time.time() < end:
            pid = os.fork()
            if pid == 0:
                held = register(1 * MIB)  # noqa: F841
                time.sleep(1.5)
                os._exit(0)
            children.append(pid)
            time.sleep(0.5)
            children = [c for c in children if os.waitpid(c, os.WNOHANG) == (0, 0)]
        for c in children:
            os.waitpid(c, 0)
        say("registrants done")
    else:
        sys.exit(f"unknown pattern {pattern}")
    say("done")


def crowd(count):
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            held = over_lowered_limit()  # noqa: F841 (unmapped when collected)
            # Until the parent goes: the crowd ends with its leader.
            while os.getppid() != 1:
                time.sleep(1)
            os._exit(0)
        children.append(pid)
    say(f"crowd ready {count}")
    sys.stdin.read()
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    say("done")


def lowered():
    held = over_lowered_limit()  # noqa: F841
    say("lowered ready")
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1)


def churn(rate, seconds):
    """Forks spread evenly over each second, and reaped at once: forked in bursts of RATE once a
    second and reaped only at the next burst, each child was a zombie for the second half of
    each second, and an exporter sampling once a second in that half saw none of them alive."""
    started = 0
    begin = time.monotonic()
    while started < rate * seconds:
        due = begin + started / rate
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break
        time.sleep(max(0.0, due - time.monotonic()))
        pid = os.fork()
        if pid == 0:
            held = over_lowered_limit()  # noqa: F841
            time.sleep(0.5)
            os._exit(0)
        started += 1
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    say(f"churn done {started}")


def main():
    mode = sys.argv[1]
    if mode == "crowd":
        crowd(int(sys.argv[2]))
    elif mode == "lowered":
        lowered()
    elif mode == "churn":
        churn(int(sys.argv[2]), float(sys.argv[3]))
    else:
        healthy(mode)


if __name__ == "__main__":
    main()
