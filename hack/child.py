"""A long-running child process of the real-cluster tier (hack/ansible_operator, hack/kueue): its
own session (so that stopping it stops what it started), its output in a log file, a wait that
fails with the log's tail as soon as the process dies."""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import time
import urllib.request


class Child:
    def __init__(self, name: str, log_path: pathlib.Path):
        self.name, self.log_path = name, log_path
        self.proc: subprocess.Popen | None = None
        self._log = None

    def spawn(self, argv: list[str], cwd: pathlib.Path, env: dict[str, str]) -> subprocess.Popen:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self.proc

    def wait_until(self, ok, timeout: float, what: str) -> None:
        """Poll ok() until true; RuntimeError (with the log) if the process exits, TimeoutError after timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %s:\n%s" % (self.name, self.proc.returncode, self.log_tail()))
            if ok():
                return
            time.sleep(0.2)
        raise TimeoutError("%s: no %s in %ss:\n%s" % (self.name, what, timeout, self.log_tail()))

    @staticmethod
    def http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the process group, SIGKILL after `timeout`; idempotent."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        if self._log:
            self._log.close()
            self._log = None


class Managed:
    """What AnsibleOperator and Kueue share: start()/stop() as a context manager, `proc` and
    `log_tail` of their Child, and their work directory removed at the end when they made it
    (kept when the environment variable `keep_env` is 1)."""
    keep_env = ""
    child: Child
    work: pathlib.Path
    _own_workdir: bool

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.child.proc

    def log_tail(self, chars: int = 6000) -> str:
        return self.child.log_tail(chars)

    def _remove_workdir(self) -> None:
        if self._own_workdir and os.environ.get(self.keep_env) != "1":
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()  # what start() began (a process, a lock) does not outlive the failure
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve(self, banner: str) -> int:
        """The CLI's foreground: print `banner`, wait for the process (Ctrl-C stops it), stop; its exit status."""
        print(banner, flush=True)
        try:
            self.proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()
        return self.proc.returncode or 0
