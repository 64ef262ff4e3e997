"""Files to and from a volume through the Kubernetes API, as ``kubectl cp`` moves them: a
helper pod mounts the volume, and ``tar`` runs in it over the exec WebSocket (channel
protocol v5 or v4: the first byte of each binary message is the channel, 0 stdin, 1 stdout,
2 stderr, 3 the final Status; v5's ``[255, 0]`` closes stdin).  Works against any cluster
whose helper image has tar (busybox).

The tar stream is made and taken apart here, streaming (no copy of the tree in memory or on
disk), in messages of CHUNK bytes; progress goes to stderr.
"""
from __future__ import annotations

import json
import os
import sys
import tarfile
import time
from typing import Callable, Iterator

import click

from .errors import DevctlError, one_line

CHUNK = 1 << 20
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


# --------------------------------------------------------------------------- progress
def megabytes(n: float) -> str:
    return "%.1f MB" % (n / 1e6)


class Progress:
    """Bytes and files moved so far, on stderr: a line rewritten in place on a terminal,
    else a line at each tenth of the total (or every 50 MB when the total is unknown)."""

    def __init__(self, verb: str, total: int | None = None, files: int | None = None,
                 out: Callable[[str], None] | None = None, tty: bool | None = None):
        self.verb, self.total, self.files_total = verb, total, files
        self.done = self.files = 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.out = out or (lambda text: click.echo(text, err=True, nl=False))
        self._step = max((total / 10.0) if total else 50e6, 1.0)
        self._next = self._step
        self._shown = 0.0

    def add(self, nbytes: int = 0, files: int = 0) -> None:
        self.done += nbytes
        self.files += files
        if self.tty:
            now = time.monotonic()
            if now >= self._shown + 0.2:
                self._shown = now
                self.out("\r" + self.line())
        elif self.done >= self._next:
            self.out(self.line() + "\n")
            while self._next <= self.done:
                self._next += self._step

    def line(self) -> str:
        total = " / %s" % megabytes(self.total) if self.total else ""
        files = " / %d" % self.files_total if self.files_total is not None else ""
        pct = " (%d%%)" % (100 * self.done // self.total) if self.total else ""
        return "%s %s%s%s, %d%s files" % (self.verb, megabytes(self.done), total, pct, self.files, files)

    def finish(self) -> tuple[float, float]:
        """(seconds, MB/s) and a summary line."""
        seconds = max(time.monotonic() - self.start, 1e-6)
        rate = self.done / 1e6 / seconds
        self.out(("\r" if self.tty else "") + "%s %s in %d files in %.1fs (%.1f MB/s)\n" % (
            self.verb, megabytes(self.done), self.files, seconds, rate))
        return seconds, rate


# --------------------------------------------------------------------------- the exec channels
class Exec:
    """One command's exec WebSocket (the client's WSClient, binary): send stdin, read
    stdout, collect stderr and the final Status."""

    def __init__(self, client, command: list[str]):
        from websocket import ABNF

        self.client, self.sock, self.command = client, client.sock, command
        self.binary = ABNF.OPCODE_BINARY
        self.v5 = client.subprotocol == "v5.channel.k8s.io"
        self.stderr = bytearray()
        self.status: dict | None = None
        self.closed = False

    def send(self, data: bytes) -> bool:
        """Send stdin; False once the other end is gone (the command ended: see result())."""
        from websocket import WebSocketException

        view = memoryview(data)
        try:
            for i in range(0, len(view), CHUNK):
                self.sock.send(b"\x00" + bytes(view[i:i + CHUNK]), opcode=self.binary)
        except (WebSocketException, OSError):
            return False
        return True

    def close_stdin(self) -> None:
        from websocket import WebSocketException

        if self.v5:  # v4 has no end of stdin: tar stops at the archive's end-of-archive blocks
            try:
                self.sock.send(bytes([CLOSE, STDIN]), opcode=self.binary)
            except (WebSocketException, OSError):
                pass

    def frames(self) -> Iterator[bytes]:
        """stdout chunks until the command ends (stderr and the Status are kept)."""
        from websocket import ABNF, WebSocketException

        while not self.closed:
            try:
                opcode, frame = self.sock.recv_data_frame(True)
            except (WebSocketException, OSError):
                self.closed = True
                break
            if opcode == ABNF.OPCODE_CLOSE:
                self.closed = True
                break
            data = frame.data
            if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == STDOUT:
                yield payload
            elif channel == STDERR:
                self.stderr += payload
            elif channel == ERROR:
                try:
                    self.status = json.loads(payload)
                except ValueError:
                    self.status = {"status": "Failure", "message": payload.decode(errors="replace")}

    def result(self) -> int:
        """Read to the end; the exit code (0: Success)."""
        for _ in self.frames():
            pass
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - already closed
            pass
        status = self.status or {}
        if status.get("status") == "Success":
            return 0
        causes = (status.get("details") or {}).get("causes") or []
        for cause in causes:
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message") or 1)
        return 1 if status or self.stderr else 0

    def error(self, what: str) -> DevctlError:
        err = one_line(self.stderr.decode(errors="replace")) or one_line((self.status or {}).get("message") or "")
        return DevctlError(f"{what} failed in the helper pod: {err or 'the command failed'}")


def run(api, namespace: str, pod: str, command: list[str]) -> tuple[int, bytes, str]:
    """(exit code, stdout, stderr) of a short command in the helper pod."""
    ex = Exec(api.exec_stream(namespace, pod, command), command)
    out = b"".join(ex.frames())
    code = ex.result()
    return code, out, ex.stderr.decode(errors="replace")


# --------------------------------------------------------------------------- upload
class _Sender:
    """A file object for tarfile's streaming writer: stdin messages of CHUNK bytes."""

    def __init__(self, ex: Exec, progress: Progress):
        self.ex, self.progress = ex, progress
        self.buf = bytearray()
        self.sent = 0
        self.broken = False

    def write(self, data) -> int:
        self.buf += data
        if len(self.buf) >= CHUNK:
            self._flush(len(self.buf) - len(self.buf) % CHUNK)
        return len(data)

    def _flush(self, n: int) -> None:
        if n and not self.broken:
            if not self.ex.send(bytes(self.buf[:n])):
                self.broken = True
            self.sent += n
        del self.buf[:n]

    def close(self) -> None:
        self._flush(len(self.buf))


def tree(local: str) -> tuple[list[tuple[str, str]], int]:
    """[(path, name in the archive)] of a directory's entries (sorted) and their bytes."""
    entries, total = [], 0
    for root, dirs, files in os.walk(local):
        dirs.sort()
        rel = os.path.relpath(root, local)
        if rel != ".":
            entries.append((root, rel))
        for name in sorted(files):
            path = os.path.join(root, name)
            entries.append((path, os.path.normpath(os.path.join(rel, name))))
            try:
                total += os.lstat(path).st_size
            except OSError:
                pass
    return entries, total


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def upload(api, namespace: str, pod: str, local: str, target: str, progress: Progress | None = None) -> Progress:
    """Copy the directory ``local`` into ``target`` (a directory in the pod): ``tar -x`` there."""
    entries, total = tree(local)
    files = sum(1 for path, _ in entries if not os.path.isdir(path))
    progress = progress or Progress("uploaded", total, files)
    command = ["tar", "-x", "-f", "-", "-C", target]
    ex = Exec(api.exec_stream(namespace, pod, command, stdin=True), command)
    sender = _Sender(ex, progress)
    with tarfile.open(fileobj=sender, mode="w|", bufsize=CHUNK, format=tarfile.PAX_FORMAT) as tf:
        for path, name in entries:
            if sender.broken:
                break
            tf.add(path, arcname=name, recursive=False, filter=_plain)
            if not os.path.isdir(path):
                progress.add(os.lstat(path).st_size, 1)
    sender.close()
    ex.close_stdin()
    if ex.result() != 0 or sender.broken:
        raise ex.error("tar -x into %s" % target)
    progress.finish()
    return progress


# --------------------------------------------------------------------------- download
class _Receiver:
    """A file object for tarfile's streaming reader: the command's stdout (at most ``limit``
    bytes: past it, TooLarge)."""

    def __init__(self, ex: Exec, progress: Progress, limit: int | None = None):
        self.frames = ex.frames()
        self.progress = progress
        self.cur = b""
        self.pos = 0
        self.limit, self.received = limit, 0

    def read(self, size: int = -1) -> bytes:
        parts = []
        while size < 0 or size > 0:
            if self.pos >= len(self.cur):
                nxt = next(self.frames, None)
                if nxt is None:
                    break
                self.cur, self.pos = nxt, 0
                self.received += len(nxt)
                if self.limit is not None and self.received > self.limit:
                    raise TooLarge("the stream passed %s (--max-size and its headers): stopped" % megabytes(self.limit))
                self.progress.add(len(nxt))
                continue
            take = len(self.cur) - self.pos if size < 0 else min(size, len(self.cur) - self.pos)
            parts.append(self.cur[self.pos:self.pos + take])
            self.pos += take
            if size > 0:
                size -= take
        return b"".join(parts)


# The defaults of ``devctl infer download``'s limits (--max-size, --max-files).
DOWNLOAD_MAX_BYTES = 20 * 1024 ** 3
DOWNLOAD_MAX_FILES = 200_000
SKIPPED_SHOWN = 20  # the skipped members named one by one on stderr, then a count
# Bytes a tar stream may hold beyond its files' data: headers (a member's PAX header, name,
# link target) and padding, per member, plus the end-of-archive blocks.
_TAR_OVERHEAD = 8 * 1024


class TooLarge(DevctlError):
    """The download passed one of its limits: stopped there."""


def _inside(name: str) -> str | None:
    """The archive member's path, normalised ("./a/b" -> "a/b"), or None when it is absolute,
    climbs out (``..``) or is empty."""
    if name.startswith("/") or "\\" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


class Extractor:
    """Takes a tar stream apart into ``local``, as untrusted input (what a job left on its volume):

    * members whose path is absolute or climbs out (``..``) are skipped, and so is any member
      below a symbolic link of the archive or whose directory is not inside ``local`` on disk;
    * symbolic and hard links are skipped unless ``links``; then a symbolic link is kept only
      when its target is relative and never goes up (no ``..``: it can only point below its
      own directory), and a hard link only to a regular file this archive already wrote;
    * devices, FIFOs and other special files are always skipped;
    * at most ``max_files`` members and ``max_bytes`` of file data (the stream itself at most
      that plus the members' headers): past either, TooLarge (what was written stays);
    * files are then written with tarfile's ``data`` filter too (modes, owners).

    Each skipped member is reported through ``skip(name, why)``; by default on stderr (the first
    SKIPPED_SHOWN by name, then how many more: ``summary()``).  Not tarfile's filter alone for
    links: before Python 3.11.13 / 3.12.11 it does not normalise a link's target through links
    the same archive made (``z -> .`` then ``z/z/.../../..``)."""

    def __init__(self, local: str, max_bytes: int = DOWNLOAD_MAX_BYTES, max_files: int = DOWNLOAD_MAX_FILES,
                 links: bool = False, skip: Callable[[str, str], None] | None = None):
        self.local, self.root = local, os.path.realpath(local)
        self.max_bytes, self.max_files, self.links = int(max_bytes), int(max_files), links
        self.skip = skip or self._warn
        self.skipped: list[tuple[str, str]] = []
        self.files = self.members = self.bytes = 0
        self._symlinks: set[str] = set()
        self._regular: set[str] = set()

    def _warn(self, name: str, why: str) -> None:
        if len(self.skipped) <= SKIPPED_SHOWN:
            click.echo("warning: skipped %s: %s" % (name, why), err=True)

    def summary(self) -> None:
        """How many skipped members were not named (default reporting)."""
        if self.skip == self._warn and len(self.skipped) > SKIPPED_SHOWN:
            click.echo("warning: skipped %d more member(s)" % (len(self.skipped) - SKIPPED_SHOWN), err=True)

    def stream_limit(self) -> int:
        return self.max_bytes + _TAR_OVERHEAD * (self.max_files + 1)

    def _skip(self, name: str, why: str) -> None:
        self.skipped.append((name, why))
        self.skip(name, why)

    def _dir_inside(self, path: str) -> bool:
        parent = os.path.realpath(os.path.join(self.root, os.path.dirname(path)))
        return parent == self.root or parent.startswith(self.root + os.sep)

    def _why_not(self, member: tarfile.TarInfo, path: str | None) -> str | None:
        if path is None:
            return "its path is absolute or outside the directory"
        below = path.split("/")
        if any("/".join(below[:i]) in self._symlinks for i in range(1, len(below))):
            return "it is below a symbolic link"
        if not self._dir_inside(path):
            return "its directory is outside %s" % self.local
        if os.path.islink(os.path.join(self.root, path)) and not (member.issym() or member.islnk()):
            return "it would be written through the symbolic link already at %s" % os.path.join(self.local, path)
        if member.issym():
            if not self.links:
                return "a symbolic link (-> %s): use --links to keep links" % member.linkname
            target = member.linkname
            if not target or target.startswith("/") or ".." in target.split("/") or "\\" in target:
                return "a symbolic link (-> %s) that is absolute or goes up" % target
        elif member.islnk():
            if not self.links:
                return "a hard link (-> %s): use --links to keep links" % member.linkname
            if _inside(member.linkname) not in self._regular:
                return "a hard link (-> %s) to no file of this download" % member.linkname
        elif not (member.isfile() or member.isdir()):
            return "a special file (device, FIFO)"
        return None

    def extract(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> bool:
        """Write one member (True), or skip it (False); TooLarge past a limit."""
        self.members += 1
        if self.members > self.max_files:
            raise TooLarge("more than %d files (--max-files): stopped" % self.max_files)
        path = _inside(member.name)
        if path is None and member.isdir() and member.name.strip("/") in ("", "."):
            return False  # the archive's own top directory ("./")
        why = self._why_not(member, path)
        if why:
            self._skip(member.name, why)
            return False
        if member.isfile():
            self.bytes += member.size
            if self.bytes > self.max_bytes:
                raise TooLarge("more than %s of files (--max-size): stopped at %s" % (
                    megabytes(self.max_bytes), member.name))
        member = member.replace(name=path, linkname=_inside(member.linkname) or member.linkname
                                if member.islnk() else member.linkname, deep=False)
        tf.extract(member, self.local, filter="data")
        if member.issym():
            self._symlinks.add(path)
        elif member.isfile() or member.islnk():
            self._regular.add(path)
            self.files += 1
        else:
            self._symlinks.discard(path)
        return True


def download(api, namespace: str, pod: str, source: str, local: str, progress: Progress | None = None,
             extractor: Extractor | None = None) -> Progress:
    """Copy the directory ``source`` of the pod into ``local``: ``tar -c`` there, taken apart
    by ``extractor`` (an Extractor with its defaults: no links, the size limits)."""
    progress = progress or Progress("downloaded")
    os.makedirs(local, exist_ok=True)
    extractor = extractor or Extractor(local)
    command = ["tar", "-c", "-f", "-", "-C", source, "."]
    ex = Exec(api.exec_stream(namespace, pod, command), command)
    receiver = _Receiver(ex, progress, extractor.stream_limit())
    try:
        with tarfile.open(fileobj=receiver, mode="r|", bufsize=CHUNK) as tf:
            for member in tf:
                if extractor.extract(tf, member) and member.isfile():
                    progress.files += 1
    except TooLarge as exc:
        _close(ex)
        raise DevctlError(f"the download of {source} into {local} is too large: {exc}") from None
    except tarfile.ReadError as exc:
        if ex.result() != 0:
            raise ex.error("tar -c of %s" % source) from None
        raise DevctlError(f"the archive of {source} is not readable: {exc}") from None
    except (tarfile.FilterError, OSError) as exc:
        raise DevctlError(f"cannot write into {local}: {one_line(exc)}") from None
    extractor.summary()
    if ex.result() != 0:
        raise ex.error("tar -c of %s" % source)
    progress.finish()
    return progress


def _close(ex: Exec) -> None:
    try:
        ex.client.close()
    except Exception:  # noqa: BLE001 - already closed
        pass
