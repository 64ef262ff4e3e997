"""A fork server for Python processes that Ansible starts: module runs and ``ansible-playbook``.

Each reconcile of the local runtime is an ``ansible-playbook`` process, and every module task
in it another Python process; most of their start-up is importing the same libraries (the
Kubernetes client alone takes ~0.4 s a process). The fork server imports them once and forks a
child per request, so a run starts with them already imported:

* the server (``main()``: ``--socket PATH --preload M1,M2 [--ansiballz]``, started by
  ``ForkServer``) imports the preload modules and listens on a unix socket;
* the client is a tiny generated script (``write_shim``, run with ``python -IS``), used as
  ``ansible_python_interpreter`` and as the ``ansible-playbook`` command. It sends its argv,
  working directory and environment, and passes its own stdin/stdout/stderr descriptors
  (SCM_RIGHTS); the server forks a supervisor that forks the worker, which takes over those
  descriptors, environment and directory and runs the script with ``runpy`` as ``__main__``;
  the supervisor waits for it and sends the exit status back, which the client exits with;
  when the client dies first the worker is terminated;
* whatever the client cannot forward exactly (``python -c``, ``-m``, interpreter flags, no
  server) it ``exec``s the real interpreter with unchanged arguments instead.

The runtime starts two servers. Module runs: third-party libraries (the Kubernetes client)
and, with ``--ansiballz``, the ansible.module_utils every module imports; ``AnsiballZFinder``
keeps everything else (the module, our module_utils, collections) coming from the run's
AnsiballZ payload. ``ansible-playbook``: ansible itself, with the runs' static environment;
the child sees the environment of its request, not of the server, so each run re-reads
Ansible's configuration constants (``_refresh_ansible_config``). With ``--ansible-cache`` the
playbook server also keeps what each run would compute again: the AnsiballZ payloads
(``_share_ansiballz_cache``, keyed by a fingerprint of the module sources), the parsed
collection metadata (``_memoize_collection_metadata``) and the connection/shell/become plugins
(``_preload_plugins``). A worker runs its own exit handlers, as an interpreter does at exit.
The behaviour of what runs is unchanged; only the start-up work is saved. ansible-operator has
no such server: each run there is a fresh process (see bench/reconcile.py for both figures).
"""
from __future__ import annotations

import argparse
import array
import atexit
import hashlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import struct
import sys
from typing import Any

# Third-party libraries that module runs import (kubernetes.core, our modules); importing them
# reads no Ansible configuration.
DEFAULT_PRELOAD = (
    "kubernetes.client", "kubernetes.config", "kubernetes.dynamic", "kubernetes.watch",
    "kubernetes.stream", "urllib3", "yaml", "jsonpatch", "jinja2", "json", "datetime",
    "hashlib", "tempfile", "shlex", "subprocess", "locale", "selectors", "syslog", "platform",
)
# With --ansiballz: ansible's module_utils that every module run imports. A module run imports
# them from its AnsiballZ payload (a zip on sys.path[0]); AnsiballZFinder makes everything NOT
# preloaded still come from that zip (our module_utils, the module itself, collections).
ANSIBALLZ_PRELOAD = (
    "ansible.module_utils.basic", "ansible.module_utils._internal._ansiballz._loader",
    "ansible.module_utils.common.arg_spec", "ansible.module_utils.common.json",
    "ansible.module_utils.common.parameters", "ansible.module_utils.common.validation",
    "ansible.module_utils.common.text.converters", "ansible.module_utils.six",
    "ansible.module_utils._internal._errors", "ansible.module_utils._internal._messages",
    "ansible.module_utils._internal._traceback", "ansible.module_utils._internal._datatag",
)
# What ``ansible-playbook`` imports before it reads a playbook (the server for playbook runs
# is started with the runs' static environment; see _refresh_ansible_config for the rest).
PLAYBOOK_PRELOAD = (
    "ansible.cli.playbook", "ansible.executor.playbook_executor",
    "ansible.executor.task_executor", "ansible.executor.task_queue_manager",
    "ansible.executor.process.worker", "ansible.plugins.strategy.linear",
    "ansible.plugins.action.normal", "ansible.plugins.action.set_fact",
    "ansible.plugins.connection.local", "ansible.plugins.shell.sh",
    "ansible.template", "ansible.vars.manager", "ansible.inventory.manager",
    "ansible.parsing.dataloader", "ansible.playbook.play", "ansible.playbook.role",
    "ansible.playbook.block", "ansible.playbook.task", "ansible.playbook.role_include",
    "ansible.playbook.task_include", "ansible.playbook.included_file",
    "ansible.plugins.callback", "ansible.plugins.filter.core", "ansible.plugins.test.core",
    "jinja2", "yaml", "json", "multiprocessing", "queue",
    # the torchdev.operator action plugins (k8s_observe, k8s_status, k8s_apply) make their
    # requests with the Kubernetes client in the ansible-playbook process
    "kubernetes.client", "kubernetes.config",
)
MAX_REQUEST = 4 * 1024 * 1024
# Set by serve() from the command line (--ansible-cache).
OPTIONS: dict[str, Any] = {"ansiballz_cache": None}


class AnsiballZFinder:
    """A meta path finder for module runs in a server that preloaded ansible.module_utils.

    Python would look up a submodule of a preloaded package (``ansible``,
    ``ansible.module_utils``) only in that package's directory in site-packages, where the
    module being run, our module_utils and the collections' are not. They are in the module's
    AnsiballZ payload, the zip the wrapper puts first on sys.path: this finder looks there
    first for every ``ansible.*``/``ansible_collections.*`` name that is not imported yet.
    The preloaded modules are the controller's own files, the ones the payload was built
    from, so what runs is the same code either way.
    """

    PREFIXES = ("ansible.", "ansible_collections")

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith(cls.PREFIXES):
            return None
        zip_path = next((p for p in sys.path[:1] if p.endswith(".zip")), None)
        if zip_path is None:
            return None
        import zipimport
        parent = name.rpartition(".")[0]
        where = os.path.join(zip_path, *parent.split(".")) if parent else zip_path
        try:
            return zipimport.zipimporter(where).find_spec(name)
        except (zipimport.ZipImportError, OSError):
            return None


def _refresh_ansible_config() -> None:
    """In a worker of a server that preloaded ansible: re-read every configuration constant.

    ansible.constants evaluates the configuration (ansible.cfg + ANSIBLE_* variables) when it
    is imported, which happened in the server with the server's environment; the request's
    environment can differ (per-run paths), so the constants are set again exactly the way
    the module does at import time.
    """
    const = sys.modules.get("ansible.constants")
    if const is None:
        return
    config = const.config
    for setting in config.get_configuration_definitions():
        const.set_constant(setting, config.get_config_value(setting, variables=vars(const)))


def _module_source_fingerprint(const: Any) -> str:
    """What AnsiballZ payloads are built from besides ansible itself: the ``library`` and
    ``module_utils`` paths, those of every role on the roles path and every collection's
    modules and module_utils (path, size and mtime of each file), so that an edited module is
    never served from the cache."""
    roots = [*const.DEFAULT_MODULE_PATH, *const.DEFAULT_MODULE_UTILS_PATH]
    for base in const.DEFAULT_ROLES_PATH:
        for role in _listdir(base):
            roots += [os.path.join(base, role, "library"), os.path.join(base, role, "module_utils")]
    for collection in _collection_dirs(const):
        plugins = os.path.join(collection, "plugins")
        roots += [os.path.join(plugins, "modules"), os.path.join(plugins, "module_utils")]
    digest = hashlib.sha256()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fname in sorted(filenames):
                path = os.path.join(dirpath, fname)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _collection_dirs(const: Any) -> list[str]:
    """The directory of every collection installed on the collections paths."""
    return [os.path.join(base, "ansible_collections", namespace, name)
            for base in const.COLLECTIONS_PATHS
            for namespace in _listdir(os.path.join(base, "ansible_collections"))
            for name in _listdir(os.path.join(base, "ansible_collections", namespace))]


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _share_ansiballz_cache(cache_root: str) -> None:
    """In a playbook worker: keep the AnsiballZ payloads across runs.

    Ansible zips a module with the module_utils it imports (``recursive_finder``) into a
    cache under its per-process ``DEFAULT_LOCAL_TMP``, so every ``ansible-playbook`` process
    builds each module's payload again; that was a third of a reconcile's CPU. The payload
    does not depend on the task's arguments: the cache directory of every run is made a link
    to one under ``cache_root``, per fingerprint of the module sources.
    """
    const = sys.modules.get("ansible.constants")
    if const is None:
        return
    shared = os.path.join(cache_root, _module_source_fingerprint(const))
    os.makedirs(shared, exist_ok=True)
    link = os.path.join(const.DEFAULT_LOCAL_TMP, "ansiballz_cache")
    if not os.path.lexists(link):
        os.symlink(shared, link)


def _memoize_collection_metadata() -> None:
    """In the playbook server: parse each collection's routing metadata once.

    Every ``ansible-playbook`` run parses ``ansible_builtin_runtime.yml`` (370 KB of YAML,
    0.13 s) and each collection's ``meta/runtime.yml``. The parser is wrapped with a cache
    keyed by the file's content, filled here before any worker is forked; a hit returns a
    fresh copy (``pickle``), as the parser would.
    """
    try:
        import pickle

        import ansible
        const = importlib.import_module("ansible.constants")
        finder = importlib.import_module("ansible.utils.collection_loader._collection_finder")
    except ImportError:
        return
    parse = finder._meta_yml_to_dict
    if parse is None:
        return
    memo: dict[bytes, bytes] = {}

    def cached(data: Any, content_id: Any) -> Any:
        key = data.encode() if isinstance(data, str) else data
        hit = memo.get(key) if isinstance(key, bytes) else None
        if hit is not None:
            return pickle.loads(hit)
        result = parse(data, content_id)
        if isinstance(key, bytes):
            memo[key] = pickle.dumps(result)
        return result

    finder._meta_yml_to_dict = cached
    files = [os.path.join(os.path.dirname(ansible.__file__), "config", "ansible_builtin_runtime.yml")]
    files += [os.path.join(collection, "meta", "runtime.yml") for collection in _collection_dirs(const)]
    for path in files:
        try:
            with open(path, "rb") as fh:
                cached(fh.read(), path)
        except Exception:  # noqa: BLE001 - a broken file is reported by the run itself
            pass


def _preload_plugins() -> None:
    """In the playbook server: load the connection, shell and become plugins once.

    Every ``ansible-playbook`` run loads all of them and parses the DOCUMENTATION (YAML) of
    each to register its configuration definitions: 0.1 s a run. Loaded here, with the runs'
    configuration (the server has their static environment), a run finds the plugin modules
    in sys.modules and their definitions registered, which is what it checks first.
    """
    try:
        from ansible.plugins import loader
    except ImportError:
        return
    # Not the callbacks: with them loaded in the server (ansible-runner's event callback among
    # them) the runs hung; a run loads its callbacks itself.
    for plugin_loader in (loader.connection_loader, loader.shell_loader, loader.become_loader):
        try:
            list(plugin_loader.all(class_only=True))
        except Exception:  # noqa: BLE001 - the run loads them again and reports the error
            pass


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("client went away")
        buf += chunk
    return buf


def read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: a 4-byte length, then JSON; the descriptors come with the first bytes."""
    fds = array.array("i")
    msg, anc, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, typ, data in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    if len(msg) < 4:
        msg += _recv_exact(conn, 4 - len(msg))
    (length,) = struct.unpack("!I", msg)
    if length > MAX_REQUEST:
        raise ValueError("request too large")
    return json.loads(_recv_exact(conn, length)), list(fds)


def _run_worker(req: dict[str, Any], fds: list[int]) -> None:
    """In the forked worker: become the requested process, then exit with its status."""
    code = 1
    # exit handlers registered by the server (ansible.constants' temporary directory) are
    # not the worker's; its own run at its exit, as in an interpreter
    atexit._clear()
    try:
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        _refresh_ansible_config()
        if OPTIONS["ansiballz_cache"]:
            _share_ansiballz_cache(OPTIONS["ansiballz_cache"])
        argv = req["argv"]
        sys.argv = list(argv) if argv else [""]
        # fresh stdio objects on the new descriptors (the server's were replaced)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0])) if argv and argv[0] != "-" else ""
        try:
            if argv and argv[0] != "-":
                runpy.run_path(argv[0], run_name="__main__")
            else:
                source = sys.stdin.read()
                exec(compile(source, "<stdin>", "exec"), {"__name__": "__main__",
                                                         "__builtins__": __builtins__})
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - report like the interpreter does
            import traceback
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
    finally:
        os._exit(code & 0xFF)


def _serve_one(conn: socket.socket) -> None:
    """In the forked supervisor: fork the worker, wait for it, send back its status.

    When the client goes away first (killed, e.g. by a task timeout, or with the runtime that
    ran it) the worker is terminated with everything it started: it leads a process group of
    its own (an ansible-playbook's task forks and module processes), which gets SIGTERM. A
    runtime killed with SIGKILL so leaves no run behind that writes after it.
    """
    status = 1
    try:
        req, fds = read_request(conn)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w, conn.fileno()):
                os.close(fd)
            _run_worker(req, fds)
        for fd in fds:
            os.close(fd)
        raw = None
        while raw is None:
            done, raw_status = os.waitpid(pid, os.WNOHANG)
            if done:
                raw = raw_status
                break
            ready, _, _ = select.select([conn, wake_r], [], [])
            if conn in ready and not conn.recv(1):
                try:
                    os.killpg(pid, signal.SIGTERM)
                except OSError:  # the worker has not made its group yet, or is gone
                    os.kill(pid, signal.SIGTERM)
                conn.close()
                os.waitpid(pid, 0)
                os._exit(0)
            if wake_r in ready:
                os.read(wake_r, 512)
        status = os.waitstatus_to_exitcode(raw)
        if status < 0:  # killed by a signal: report it like a shell does
            status = 128 - status
    except Exception:  # noqa: BLE001
        status = 1
    try:
        conn.sendall(struct.pack("!i", status))
    except OSError:
        pass
    os._exit(0)


def serve(path: str, preload: list[str], ansiballz: bool = False,
          ansible_cache: str | None = None, lifeline: int | None = None) -> None:
    """Serve requests on the unix socket ``path`` until SIGTERM or, with ``lifeline`` (the
    read end of a pipe whose write end only the runtime holds), until the runtime is gone."""
    if ansiballz:
        sys.meta_path.insert(0, AnsiballZFinder)
        preload = [*preload, *ANSIBALLZ_PRELOAD]
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if ansible_cache:
        OPTIONS["ansiballz_cache"] = os.path.join(ansible_cache, "ansiballz")
        _memoize_collection_metadata()
        _preload_plugins()

    def stop(*_: Any) -> None:
        atexit._run_exitfuncs()
        os._exit(0)

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped automatically
    signal.signal(signal.SIGTERM, stop)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.unlink(tmp)
    srv.bind(tmp)
    srv.listen(64)
    os.replace(tmp, path)  # the socket appears only when the server accepts
    watched = [srv] if lifeline is None else [srv, lifeline]
    while True:
        try:
            ready, _, _ = select.select(watched, [], [])
            if lifeline in ready:  # the runtime is gone: so is the server
                try:
                    os.unlink(path)
                except OSError:
                    pass
                stop()
            conn, _ = srv.accept()
        except InterruptedError:
            continue
        pid = os.fork()
        if pid == 0:
            srv.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _serve_one(conn)
        conn.close()


SHIM = """#!{python} -IS
# torchdev_runtime fork-server client (generated; see torchdev_runtime/forkserver.py)
import array, json, os, socket, struct, sys
PYTHON = {python!r}
SOCKET = {socket!r}


def fallback():
    os.execv(PYTHON, [PYTHON] + sys.argv[1:])


args = sys.argv[1:]
if args and args[0].startswith("-") and args[0] != "-":
    fallback()
try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(SOCKET)
except OSError:
    fallback()
req = json.dumps({{"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
conn.sendmsg([struct.pack("!I", len(req))],
             [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
conn.sendall(req)
buf = b""
while len(buf) < 4:
    chunk = conn.recv(4 - len(buf))
    if not chunk:
        sys.exit(1)
    buf += chunk
sys.exit(struct.unpack("!i", buf)[0])
"""


def write_shim(path: str, socket_path: str, python: str | None = None) -> str:
    """Writes the client script (executable) that forwards to the server at socket_path."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(SHIM.format(python=python or sys.executable, socket=socket_path))
    os.chmod(path, 0o755)
    return path


class ForkServer:
    """The server as a child process of the runtime, and the shim that talks to it."""

    def __init__(self, work_dir: str, name: str = "python",
                 preload: tuple[str, ...] = DEFAULT_PRELOAD, python: str | None = None,
                 env: dict[str, str] | None = None, ansiballz: bool = False,
                 ansible_cache: bool = False):
        self.work_dir = work_dir
        self.ansiballz = ansiballz
        self.ansible_cache = os.path.join(work_dir, f"{name}.cache") if ansible_cache else None
        self.preload = preload
        self.python = python or sys.executable
        self.env = env
        self.socket = os.path.join(work_dir, f"{name}.sock")
        self.shim = os.path.join(work_dir, name)
        self.proc: Any = None
        self._lifeline: int | None = None

    def start(self, timeout: float = 30.0) -> "ForkServer":
        import subprocess
        import time

        # The server runs in its own session (a terminal's ^C reaches the runtime, which stops
        # it), so nothing kills it with the runtime: it holds the read end of this pipe and
        # exits when the write end, which only this process holds, closes -- also when the
        # runtime is killed (SIGKILL) and cannot stop it.
        lifeline, self._lifeline = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [self.python, "-c", "import sys; from torchdev_runtime.forkserver import main; "
                 "sys.exit(main(sys.argv[1:]))", "--socket", self.socket,
                 "--preload", ",".join(self.preload), "--lifeline-fd", str(lifeline)]
                + (["--ansiballz"] if self.ansiballz else [])
                + (["--ansible-cache", self.ansible_cache] if self.ansible_cache else []),
                stdin=subprocess.DEVNULL, start_new_session=True, env=self.env, pass_fds=(lifeline,),
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        finally:
            os.close(lifeline)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the fork server did not start")
            time.sleep(0.02)
        write_shim(self.shim, self.socket, self.python)
        return self

    def stop(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self.proc.kill()
        try:
            os.unlink(self.socket)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fork server for Ansible's Python processes")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--preload", default=",".join(DEFAULT_PRELOAD))
    ap.add_argument("--ansiballz", action="store_true",
                    help="module runs: preload ansible.module_utils (see AnsiballZFinder)")
    ap.add_argument("--ansible-cache", metavar="DIR",
                    help="ansible-playbook runs: keep AnsiballZ payloads in DIR across runs, "
                         "parse collection metadata and load the plugins every run loads once")
    ap.add_argument("--lifeline-fd", type=int, metavar="FD",
                    help="exit when this pipe's write end (held by the runtime) closes")
    args = ap.parse_args(argv)
    serve(args.socket, [m for m in args.preload.split(",") if m], args.ansiballz,
          args.ansible_cache, args.lifeline_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
