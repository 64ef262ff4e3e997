#!/usr/bin/env python3
"""Run a command with a loopback and a /tmp of the real tier's own, so that real tiers run side
by side on one machine: `python -m hack.isolate DIR -- make test-real` runs a real tier beside
another one, or beside tests/real (on 2 cores not beside make test's pytest: README, "The real
control plane").

    python -m hack.isolate DIR -- COMMAND [ARG...]
    python -m hack.isolate --check       # exit 0 when this machine allows it (root, namespaces)

What one real tier holds for the whole machine, and what this gives the command instead:

* ansible-operator v1.39.0 hands ansible-runner a kubeconfig naming http://localhost:8888 whatever
  --proxy-port says, and serves its own API on a fixed port: a network namespace of its own (a
  new loopback, brought up; nothing else) gives each command its own ports 8888 and 5050. The
  control plane, Kueue, the operator and the tests all talk over loopback, so nothing else is
  needed.
* It writes its runner input under the fixed /tmp/ansible-operator: a mount namespace of its own
  (mounts private) binds DIR/ansible-operator there.
* hack/ansible_operator/run.py's PROXY_LOCK and every temporary directory: TMPDIR=DIR/tmp.
* Kueue's visibility API needs an address that is not loopback (hack/kueue/run.py's host_ip):
  HOST_IP on lo:1, named by TORCHDEV_HOST_IP.

Linux only, as root (CAP_SYS_ADMIN): unshare(2) through libc, mount(2), the SIOCSIFFLAGS ioctl.
`--check` tries it in a child process. A command in the namespace has no route out: lay out the
image's HOME first (python -m hack.image), which fetches what the Dockerfile's RUN lines install.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import pathlib
import shutil
import socket
import struct
import sys
import tempfile

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCSIFADDR = 0x8916
IFF_UP = 0x1
# An address of the namespace's own besides 127.0.0.1 (on lo:1), for what may not name loopback:
# the EndpointSlice of Kueue's visibility API (hack/kueue/run.py's host_ip, through TORCHDEV_HOST_IP).
HOST_IP = "10.254.0.1"
FIXED_TMP = pathlib.Path("/tmp/ansible-operator")


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def _up(s: socket.socket, name: bytes) -> None:
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH14x", name, 0)))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", name, flags | IFF_UP))


def _loopback_up() -> None:
    """lo up, and HOST_IP on lo:1 (ifconfig's ioctls: no iproute2 needed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        _up(s, b"lo")
        fcntl.ioctl(s, SIOCSIFADDR, struct.pack("16sHH4s8x", b"lo:1", socket.AF_INET, 0, socket.inet_aton(HOST_IP)))
        _up(s, b"lo:1")


def enter(directory: pathlib.Path) -> dict[str, str]:
    """Move this (single-threaded) process into new network and mount namespaces laid out as the
    module says; returns the environment for the command."""
    libc = _libc()
    directory = directory.resolve()
    (directory / "ansible-operator").mkdir(parents=True, exist_ok=True)
    (directory / "tmp").mkdir(parents=True, exist_ok=True)
    FIXED_TMP.mkdir(parents=True, exist_ok=True)
    _check(libc.unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(str(directory / "ansible-operator").encode(), str(FIXED_TMP).encode(), None,
                      MS_BIND, None), "mount --bind %s" % FIXED_TMP)
    _loopback_up()
    return {**os.environ, "TMPDIR": str(directory / "tmp"), "TORCHDEV_HOST_IP": HOST_IP}


def available() -> bool:
    """Whether `enter` works here (tried in a child, which exits)."""
    trial = pathlib.Path(tempfile.mkdtemp(prefix="torchdev-isolate-check-"))
    pid = os.fork()
    if pid == 0:
        try:
            enter(trial)
            with socket.create_server(("127.0.0.1", 0)) as srv:
                socket.create_connection(srv.getsockname(), timeout=5).close()
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure means "not here"
            os._exit(1)
    ok = os.waitpid(pid, 0)[1] == 0
    shutil.rmtree(trial, ignore_errors=True)
    return ok


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        return 0 if available() else 1
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m hack.isolate DIR -- COMMAND [ARG...] | --check", file=sys.stderr)
        return 2
    try:
        env = enter(pathlib.Path(argv[0]))
    except OSError as exc:
        print("error: cannot give %s a network namespace of its own (%s): run as root, or run it without "
              "hack.isolate, one real tier at a time" % (argv[2], exc), file=sys.stderr)
        return 1
    os.execvpe(argv[2], argv[2:], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
