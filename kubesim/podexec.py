"""`pods/exec` over WebSocket, into simulated containers whose volumes hold real files.

What a client sees is the Kubernetes API's: ``GET`` (or ``POST``)
``/api/v1/namespaces/<ns>/pods/<name>/exec?command=...&container=...&stdin=...&stdout=...
&stderr=...&tty=...`` upgraded to a WebSocket with the subprotocol ``v5.channel.k8s.io`` or
``v4.channel.k8s.io``; every message is binary, its first byte the channel (0 stdin,
1 stdout, 2 stderr, 3 error, 4 resize; v5 adds 255: ``[255, n]`` closes channel n, the
client's end of stdin).  At the end the server sends a metav1.Status on channel 3 (Success,
or Failure with reason NonZeroExitCode and the exit code in details.causes) and closes.
Before the upgrade: 404 for a missing pod, 400 for a container the pod lacks, for a pod that
is not running ("unable to upgrade connection: container not found") or completed ("cannot
exec into a container in a completed pod").

The simulated kubelet runs no process, so the commands are run here, in Python, against the
container's filesystem: its volumes are directories under the simulator's volume store
(``VolumeStore``: one per PersistentVolume, removed with it; one per emptyDir, removed
with the pod), every other path the container's own scratch directory.  The commands are
a small subset of busybox, what clients of the API use to move files (``kubectl cp``,
devctl infer):

    tar -c|-x [-z] [-v] -f - [-C DIR] [PATH...]   (also bundled: tar xf -, cf -, czf -)
    wget [-q] -O FILE URL                          (http and https)
    mkdir [-p] DIR...      cat FILE...      ls [PATH...]      rm [-r] [-f] PATH...
    true    echo ARG...

Anything else exits 127 (``sh: <cmd>: not found`` on stderr).  An interactive TTY shell is
not simulated.
"""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import queue
import shutil
import tarfile
import tempfile
import threading
import urllib.error
import urllib.request
from typing import Any, Callable

from aiohttp import WSMsgType, web

from kubesim import errors

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
CHUNK = 1 << 20
# a client's messages (one stdin chunk each) may be this large
MAX_MESSAGE = 16 << 20


# --------------------------------------------------------------------------- volumes
class VolumeStore:
    """The files of the simulated volumes: ``<root>/pv/<pv name>``, ``<root>/pods/<uid>/
    volumes/<volume>`` (emptyDir) and ``<root>/pods/<uid>/rootfs/<container>``."""

    def __init__(self, api: Any):
        self.api = api
        self._root: str | None = None
        self._lock = threading.Lock()
        api.subscribe(self._on_change)

    @property
    def root(self) -> str:
        with self._lock:
            if self._root is None:
                self._root = tempfile.mkdtemp(prefix="kubesim-volumes-")
            return self._root

    def pv_dir(self, pv_name: str) -> str:
        return self._dir("pv", pv_name)

    def _dir(self, *parts: str) -> str:
        path = os.path.join(self.root, *parts)
        os.makedirs(path, exist_ok=True)
        return path

    def _on_change(self, event: str, resource: str, obj: dict, old: dict | None) -> None:
        if event != "DELETED" or self._root is None:
            return
        meta = obj.get("metadata") or {}
        if resource == "persistentvolumes":
            shutil.rmtree(os.path.join(self._root, "pv", meta.get("name", "")), ignore_errors=True)
        elif resource == "pods" and meta.get("uid"):
            shutil.rmtree(os.path.join(self._root, "pods", meta["uid"]), ignore_errors=True)

    def mounts(self, namespace: str, pod: dict, container: dict) -> list[tuple[str, str]]:
        """[(mount path, directory)] of a container, longest mount path first; "/" is the
        container's scratch directory."""
        uid = pod["metadata"]["uid"]
        volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
        out = [("/", self._dir("pods", uid, "rootfs", container.get("name", "c")))]
        for mount in container.get("volumeMounts") or []:
            vol = volumes.get(mount.get("name")) or {}
            if "persistentVolumeClaim" in vol:
                claim = self.api.get("persistentvolumeclaims", namespace, vol["persistentVolumeClaim"]["claimName"])
                pv_name = (claim.get("spec") or {}).get("volumeName")
                if not pv_name:
                    raise errors.bad_request(f"persistentvolumeclaim {claim['metadata']['name']} is not bound")
                base = self.pv_dir(pv_name)
            else:  # emptyDir and anything else: the pod's own directory for the volume
                base = self._dir("pods", uid, "volumes", mount.get("name", "v"))
            if mount.get("subPath"):
                base = self._dir(base, mount["subPath"])
            out.append((os.path.normpath(mount.get("mountPath") or "/"), base))
        return sorted(out, key=lambda m: len(m[0]), reverse=True)

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


class Filesystem:
    """A container's view: container paths -> host paths through its mounts."""

    def __init__(self, mounts: list[tuple[str, str]]):
        self.mounts = mounts

    def host(self, path: str, cwd: str = "/") -> str:
        path = os.path.normpath(os.path.join(cwd, path))
        for mount, base in self.mounts:
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                rest = path[len(mount):].lstrip("/")
                return os.path.join(base, rest) if rest else base
        raise FileNotFoundError(path)


# --------------------------------------------------------------------------- streams
class Stdin:
    """The exec's stdin as a file object (tarfile reads it in streaming mode): the client's
    messages in a bounded queue, None at its end."""

    def __init__(self):
        self.chunks: queue.Queue = queue.Queue(maxsize=64)
        self._cur = b""
        self._pos = 0
        self._eof = False

    def read(self, size: int = -1) -> bytes:
        parts, need = [], size
        while size < 0 or need > 0:
            if self._pos >= len(self._cur):
                if self._eof:
                    break
                chunk = self.chunks.get()
                if chunk is None:
                    self._eof = True
                    break
                self._cur, self._pos = chunk, 0
            take = len(self._cur) - self._pos if size < 0 else min(need, len(self._cur) - self._pos)
            parts.append(self._cur[self._pos:self._pos + take])
            self._pos += take
            need -= take
        return b"".join(parts)

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


class Out:
    """A channel the command writes to: messages of at most CHUNK bytes, sent from the
    command's thread through the server's event loop (which waits for each to be sent)."""

    def __init__(self, send: Callable[[int, bytes], None], channel: int):
        self.send, self.channel = send, channel
        self._buf = bytearray()

    def write(self, data) -> int:
        if isinstance(data, str):
            data = data.encode()
        self._buf += data
        while len(self._buf) >= CHUNK:
            self.send(self.channel, bytes(self._buf[:CHUNK]))
            del self._buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        if self._buf:
            self.send(self.channel, bytes(self._buf))
            self._buf.clear()


# --------------------------------------------------------------------------- commands
class CommandError(Exception):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _tar(args, fs, stdin, stdout, stderr):
    mode, gz, verbose, archive, cwd, paths = None, False, False, None, "/", []
    args = list(args)
    if args and not args[0].startswith("-"):  # bundled: tar xf - / czf -
        args[0] = "-" + args[0]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if arg not in ("--no-same-owner", "--no-same-permissions", "--overwrite"):
                raise CommandError(f"tar: unrecognized option '{arg}'")
        elif arg.startswith("-") and len(arg) > 1:
            for j, flag in enumerate(arg[1:]):
                if flag in "cx":
                    mode = flag
                elif flag == "z":
                    gz = True
                elif flag == "v":
                    verbose = True
                elif flag in "mop":
                    pass
                elif flag in "fC":
                    if j != len(arg) - 2 and not (flag == "f" and arg[j + 2:] == "C"):
                        raise CommandError(f"tar: option -{flag} needs an argument")
                    i += 1
                    if i >= len(args):
                        raise CommandError(f"tar: option requires an argument -- '{flag}'")
                    if flag == "f":
                        archive = args[i]
                    else:
                        cwd = args[i]
                else:
                    raise CommandError(f"tar: invalid option -- '{flag}'")
        else:
            paths.append(arg)
        i += 1
    if mode is None:
        raise CommandError("tar: need one of -c or -x")
    if archive not in (None, "-"):
        raise CommandError("tar: only -f - (stdin / stdout) is simulated")
    base = fs.host(cwd)
    if not os.path.isdir(base):
        raise CommandError(f"tar: can't change directory to '{cwd}': No such file or directory")
    if mode == "x":
        with tarfile.open(fileobj=stdin, mode="r|gz" if gz else "r|", bufsize=CHUNK) as tf:
            for member in tf:
                if verbose:
                    stdout.write(member.name + "\n")
                try:
                    tf.extract(member, base, filter="data")
                except (tarfile.FilterError, OSError) as exc:
                    raise CommandError(f"tar: {member.name}: {exc}") from None
        return 0
    if not paths:
        raise CommandError("tar: empty archive")
    with tarfile.open(fileobj=stdout, mode="w|gz" if gz else "w|", bufsize=CHUNK) as tf:
        for path in paths:
            host = os.path.join(base, path) if not path.startswith("/") else fs.host(path)
            if not os.path.exists(host):
                raise CommandError(f"tar: {path}: No such file or directory")
            tf.add(host, arcname=os.path.normpath(path).lstrip("/") or ".",
                   filter=(lambda ti: (stderr.write(ti.name + "\n"), ti)[1]) if verbose else None)
    return 0


def _wget(args, fs, stdin, stdout, stderr):
    out, url, quiet = None, None, False
    i = 0
    while i < len(args):
        if args[i] == "-O":
            i += 1
            out = args[i] if i < len(args) else None
        elif args[i] == "-q":
            quiet = True
        elif args[i].startswith("-"):
            raise CommandError(f"wget: unrecognized option '{args[i]}'")
        else:
            url = args[i]
        i += 1
    if not url or not out:
        raise CommandError("wget: usage: wget [-q] -O FILE URL")
    target = fs.host(out)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(target, "wb") as fh:
            shutil.copyfileobj(resp, fh, CHUNK)
    except urllib.error.HTTPError as exc:
        raise CommandError(f"wget: server returned error: HTTP/1.1 {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, ValueError) as exc:
        raise CommandError(f"wget: can't connect to remote host: {getattr(exc, 'reason', exc)}") from None
    except OSError as exc:
        raise CommandError(f"wget: can't open '{out}': {exc.strerror}") from None
    if not quiet:
        stderr.write(f"saving to '{out}'\n'{out}' saved\n")
    return 0


def _mkdir(args, fs, stdin, stdout, stderr):
    parents = "-p" in args
    for path in [a for a in args if not a.startswith("-")]:
        try:
            os.makedirs(fs.host(path), exist_ok=parents) if parents else os.mkdir(fs.host(path))
        except OSError as exc:
            raise CommandError(f"mkdir: can't create directory '{path}': {exc.strerror}") from None
    return 0


def _cat(args, fs, stdin, stdout, stderr):
    for path in args:
        try:
            with open(fs.host(path), "rb") as fh:
                shutil.copyfileobj(fh, stdout, CHUNK)
        except OSError as exc:
            raise CommandError(f"cat: can't open '{path}': {exc.strerror or 'No such file or directory'}") from None
    return 0


def _ls(args, fs, stdin, stdout, stderr):
    for path in [a for a in args if not a.startswith("-")] or ["."]:
        host = fs.host(path)
        if not os.path.exists(host):
            raise CommandError(f"ls: {path}: No such file or directory")
        names = sorted(os.listdir(host)) if os.path.isdir(host) else [path]
        stdout.write("".join(n + "\n" for n in names))
    return 0


def _rm(args, fs, stdin, stdout, stderr):
    flags = "".join(a[1:] for a in args if a.startswith("-"))
    for path in [a for a in args if not a.startswith("-")]:
        host = fs.host(path)
        if os.path.isdir(host) and not os.path.islink(host):
            if "r" not in flags:
                raise CommandError(f"rm: '{path}' is a directory")
            shutil.rmtree(host)
        elif os.path.lexists(host):
            os.remove(host)
        elif "f" not in flags:
            raise CommandError(f"rm: can't remove '{path}': No such file or directory")
    return 0


COMMANDS: dict[str, Callable] = {
    "tar": _tar, "wget": _wget, "mkdir": _mkdir, "cat": _cat, "ls": _ls, "rm": _rm,
    "true": lambda args, fs, i, o, e: 0,
    "echo": lambda args, fs, i, o, e: (o.write(" ".join(args) + "\n"), 0)[1],
}


def run_command(command: list[str], fs: Filesystem, stdin: Stdin, stdout: Out, stderr: Out) -> int:
    name = os.path.basename(command[0]) if command else ""
    fn = COMMANDS.get(name)
    try:
        if fn is None:
            stderr.write(f"sh: {command[0] if command else ''}: not found\n")
            return 127
        return int(fn(command[1:], fs, stdin, stdout, stderr) or 0)
    except CommandError as exc:
        stderr.write(str(exc) + "\n")
        return exc.code
    except (tarfile.TarError, EOFError, gzip.BadGzipFile) as exc:
        stderr.write(f"{name}: {exc}\n")
        return 1
    except FileNotFoundError as exc:
        stderr.write(f"{name}: {exc}: No such file or directory\n")
        return 1
    finally:
        stdout.flush()
        stderr.flush()


# --------------------------------------------------------------------------- the endpoint
def _status(command: list[str], code: int) -> dict:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command {command}, exit code {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


async def serve(request: web.Request, api: Any, volumes: VolumeStore, namespace: str, name: str) -> web.StreamResponse:
    pod = api.get("pods", namespace, name)
    q = request.query
    containers = (pod.get("spec") or {}).get("containers") or []
    cname = q.get("container") or (containers[0]["name"] if containers else "")
    container = next((c for c in containers if c.get("name") == cname), None)
    if container is None:
        raise errors.bad_request(f"container {cname} is not valid for pod {name}")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise errors.bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
    running = any(cs.get("name") == cname and "running" in (cs.get("state") or {})
                  for cs in (pod.get("status") or {}).get("containerStatuses") or [])
    if phase != "Running" or not running:
        raise errors.bad_request(f'unable to upgrade connection: container not found ("{cname}")')
    command = q.getall("command", [])
    if not command:
        raise errors.bad_request("you must specify at least 1 command")
    fs = Filesystem(volumes.mounts(namespace, pod, container))

    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=MAX_MESSAGE, autoping=True)
    await ws.prepare(request)
    loop = asyncio.get_running_loop()
    stdin = Stdin()
    wanted = {STDOUT: q.get("stdout") in ("true", "1"), STDERR: q.get("stderr") in ("true", "1")}

    def send(channel: int, data: bytes) -> None:
        if wanted.get(channel, True) and not ws.closed:
            asyncio.run_coroutine_threadsafe(ws.send_bytes(bytes([channel]) + data), loop).result()

    def work() -> int:
        try:
            return run_command(command, fs, stdin, Out(send, STDOUT), Out(send, STDERR))
        finally:
            threading.Thread(target=stdin.drain, daemon=True).start()  # unblock the reader

    async def read() -> None:
        async for msg in ws:
            if msg.type != WSMsgType.BINARY or not msg.data:
                continue
            channel, data = msg.data[0], msg.data[1:]
            if channel == STDIN:
                await loop.run_in_executor(None, stdin.chunks.put, bytes(data))
            elif channel == CLOSE and data[:1] == bytes([STDIN]):
                await loop.run_in_executor(None, stdin.chunks.put, None)
        await loop.run_in_executor(None, stdin.chunks.put, None)

    if q.get("stdin") not in ("true", "1"):
        stdin.chunks.put(None)
    reader = asyncio.ensure_future(read())
    try:
        code = await loop.run_in_executor(None, work)
        if not ws.closed:
            await ws.send_bytes(bytes([ERROR]) + json.dumps(_status(command, code)).encode())
    finally:
        await ws.close()
        reader.cancel()
    return ws
