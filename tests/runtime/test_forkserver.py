"""The fork server the runtime starts for Ansible's Python processes (torchdev_runtime/forkserver.py).

Each case runs a real server process and its generated client, and compares with what the plain
interpreter does where that matters."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from torchdev_runtime.forkserver import ForkServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("fs")
    env = dict(os.environ, FORKSERVER_TEST="server", ANSIBLE_FORKS="7")
    srv = ForkServer(str(d), "py", preload=("yaml", "ansible.constants"), env=env).start()
    yield srv
    srv.stop()


def run(shim, *args, stdin=None, env=None, cwd=None, timeout=60):
    return subprocess.run([shim, *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def script(tmp_path, body: str, name="s.py") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


@pytest.mark.parametrize("body, args, code, out", [
    ("import sys\nprint('argv', sys.argv[1:])\nsys.exit(3)\n", ["a", "b"], 3, "argv ['a', 'b']"),
    ("print('ok')\n", [], 0, "ok"),
    ("raise SystemExit('bad thing')\n", [], 1, ""),
    ("raise ValueError('boom')\n", [], 1, ""),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", [], 128 + 9, ""),
])
def test_exit_status_and_output_match_the_interpreter(server, tmp_path, body, args, code, out):
    path = script(tmp_path, body)
    got = run(server.shim, path, *args)
    real = run(sys.executable, path, *args)
    assert got.returncode == code
    assert got.stdout.strip() == out
    if code != 128 + 9:  # the interpreter itself reports -9 through subprocess
        assert (got.returncode, got.stdout) == (real.returncode, real.stdout)
    if "boom" in body:
        assert "ValueError: boom" in got.stderr
    if "bad thing" in body:
        assert "bad thing" in got.stderr


def test_script_from_stdin_like_ansible_pipelining(server):
    got = run(server.shim, stdin="import sys\nprint('stdin', repr(sys.argv[0]))\n")
    assert got.returncode == 0
    assert got.stdout.strip() == "stdin ''"


def test_environment_and_directory_come_from_the_client(server, tmp_path):
    path = script(tmp_path, """
        import os, sys
        print(os.environ.get('FORKSERVER_TEST'), os.getcwd(), 'yaml' in sys.modules)
    """)
    env = dict(os.environ, FORKSERVER_TEST="client")
    got = run(server.shim, path, env=env, cwd=str(tmp_path))
    value, cwd, preloaded = got.stdout.split()
    assert (value, cwd) == ("client", str(tmp_path))
    assert preloaded == "True"  # imported once by the server, inherited by the fork


def test_ansible_configuration_is_read_again_with_the_client_environment(server, tmp_path):
    path = script(tmp_path, "from ansible import constants as C\nprint(C.DEFAULT_FORKS)\n")
    assert run(server.shim, path, env=dict(os.environ, ANSIBLE_FORKS="3")).stdout.strip() == "3"
    assert run(sys.executable, path,
               env=dict(os.environ, ANSIBLE_FORKS="3")).stdout.strip() == "3"


def test_interpreter_flags_and_a_missing_server_fall_back_to_the_interpreter(server, tmp_path):
    got = run(server.shim, "-c", "import sys; print('c', 'yaml' in sys.modules)")
    assert got.stdout.strip() == "c False"  # a fresh interpreter, not a fork
    lone = ForkServer(str(tmp_path), "gone")
    from torchdev_runtime.forkserver import write_shim
    write_shim(lone.shim, lone.socket)  # no server listens there
    path = script(tmp_path, "import sys\nprint('fallback', 'yaml' in sys.modules)\nsys.exit(4)\n")
    got = run(lone.shim, path)
    assert (got.returncode, got.stdout.strip()) == (4, "fallback False")


def _written_pid(pidfile, timeout: float = 30) -> int:
    """The pid a worker script writes to ``pidfile`` once it runs."""
    deadline = time.monotonic() + timeout
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.02)
    return int(pidfile.read_text())


def test_killing_the_client_terminates_the_worker(server, tmp_path):
    pidfile = tmp_path / "pid"
    path = script(tmp_path, f"""
        import os, time
        open({str(pidfile)!r}, 'w').write(str(os.getpid()))
        time.sleep(60)
    """)
    client = subprocess.Popen([server.shim, path])
    worker = _written_pid(pidfile)
    client.send_signal(signal.SIGTERM)
    client.wait(timeout=10)
    deadline = time.monotonic() + 10
    while True:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "worker still running after its client died"
        time.sleep(0.02)


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_killing_the_client_terminates_what_the_worker_started(server, tmp_path):
    """An ansible-playbook worker's task processes and modules go with it (its process group):
    nothing it started goes on writing after the runtime that ran it is gone."""
    pidfile = tmp_path / "child"
    path = script(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, 'w').write(str(child.pid))
        time.sleep(60)
    """)
    client = subprocess.Popen([server.shim, path])
    child = _written_pid(pidfile)
    client.kill()
    client.wait(timeout=10)
    assert _gone(child), "the worker's child still runs after the client died"


def test_the_server_exits_when_its_runtime_is_gone(tmp_path):
    """The runtime holds the only write end of the server's lifeline: when the runtime dies
    (SIGKILL: no stop()), the server sees the pipe close and exits."""
    srv = ForkServer(str(tmp_path), "py", preload=("yaml",))
    runtime = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from torchdev_runtime.forkserver import ForkServer
        srv = ForkServer({str(tmp_path)!r}, "py", preload=("yaml",)).start()
        print(srv.proc.pid, flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    server_pid = int(runtime.stdout.readline())
    assert not _gone(server_pid, 0.5)
    runtime.kill()
    runtime.wait(timeout=10)
    assert _gone(server_pid), "the fork server outlived its runtime"
    assert not os.path.exists(srv.socket)


def test_exit_handlers_run_in_the_worker_as_in_the_interpreter(server, tmp_path):
    # ansible.constants makes a per-process directory (DEFAULT_LOCAL_TMP) that an exit handler
    # removes; the worker makes its own and must remove it, and only it
    for runner in (server.shim, sys.executable):
        marker = tmp_path / ("marker-" + os.path.basename(runner))
        path = script(tmp_path, f"""
            import atexit
            from ansible import constants as C
            atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))
            print(C.DEFAULT_LOCAL_TMP)
        """)
        got = run(runner, path)
        assert got.returncode == 0, got.stderr
        assert marker.read_text() == "ran"
        assert not os.path.exists(got.stdout.strip())


@pytest.fixture(scope="module")
def ansible_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsa")
    srv = ForkServer(str(d), "ap", preload=("ansible.constants", "ansible.executor.module_common"),
                     ansible_cache=True).start()
    yield srv
    srv.stop()


def test_ansiballz_cache_is_shared_until_a_module_source_changes(ansible_server, tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    (library / "mymod.py").write_text("print('v1')\n")
    path = script(tmp_path, """
        import os
        from ansible import constants as C
        print(os.path.realpath(os.path.join(C.DEFAULT_LOCAL_TMP, 'ansiballz_cache')))
    """)
    env = dict(os.environ, ANSIBLE_LIBRARY=str(library))
    first, second = (run(ansible_server.shim, path, env=env).stdout.strip() for _ in range(2))
    assert first == second and first.startswith(ansible_server.ansible_cache)
    (library / "mymod.py").write_text("print('version two')\n")
    assert run(ansible_server.shim, path, env=env).stdout.strip() != first
    # a plain interpreter keeps its payloads in its own directory
    assert not run(sys.executable, path, env=env).stdout.strip().startswith(ansible_server.ansible_cache)


def test_collection_metadata_parsed_once_is_what_the_parser_returns(ansible_server, tmp_path):
    path = script(tmp_path, """
        import json, os, ansible
        from ansible.utils.collection_loader import _collection_finder as f
        data = open(os.path.join(os.path.dirname(ansible.__file__), 'config',
                                 'ansible_builtin_runtime.yml'), 'rb').read()
        a, b = f._meta_yml_to_dict(data, 'x'), f._meta_yml_to_dict(data, 'x')
        a['plugin_routing'] = 'mutated'
        print(json.dumps(b, sort_keys=True))
    """)
    served, plain = run(ansible_server.shim, path), run(sys.executable, path)
    assert served.returncode == plain.returncode == 0, served.stderr + plain.stderr
    assert served.stdout == plain.stdout and '"plugin_routing": {' in served.stdout
