"""hack/isolate.py: what make test's real step gets beside pytest -- a loopback, port 8888, a
/tmp/ansible-operator and a TMPDIR of its own, and an address that is not loopback."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from hack import isolate

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Each child holds 127.0.0.1:8888 and HOST_IP:8888 (hack/ansible_operator/run.py's fixed proxy
# port), writes its name under /tmp/ansible-operator, then waits for a line on stdin.
CHILD = textwrap.dedent("""
    import os, socket, sys
    from hack.kueue.run import host_ip
    held = [socket.create_server((host, 8888)) for host in ("127.0.0.1", host_ip())]
    socket.create_connection(("127.0.0.1", 8888), timeout=5).close()
    open("/tmp/ansible-operator/who", "w").write(sys.argv[1])
    print(host_ip(), os.environ["TMPDIR"], flush=True)
    sys.stdin.readline()
""")


@pytest.fixture(scope="module")
def available():
    if not isolate.available():
        pytest.skip("machine: no network and mount namespaces here (not root: python -m hack.isolate --check)")


def test_two_isolated_commands_hold_the_same_fixed_port_and_paths_side_by_side(available, tmp_path):
    before = sorted(os.listdir("/tmp/ansible-operator")) if os.path.isdir("/tmp/ansible-operator") else []
    children = []
    for name in ("a", "b"):
        children.append(subprocess.Popen(
            [sys.executable, "-m", "hack.isolate", str(tmp_path / name), "--", sys.executable, "-c", CHILD, name],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    lines = [c.stdout.readline().split() for c in children]  # both hold their ports now
    outs = [c.communicate("\n", timeout=30) for c in children]
    assert [c.returncode for c in children] == [0, 0], outs
    assert lines == [[isolate.HOST_IP, str(tmp_path / n / "tmp")] for n in ("a", "b")], (lines, outs)
    assert [(tmp_path / n / "ansible-operator" / "who").read_text() for n in ("a", "b")] == ["a", "b"]
    after = sorted(os.listdir("/tmp/ansible-operator")) if os.path.isdir("/tmp/ansible-operator") else []
    assert "who" not in after and after == before


def test_check_and_usage():
    assert subprocess.run([sys.executable, "-m", "hack.isolate"], cwd=ROOT, capture_output=True).returncode == 2
    check = subprocess.run([sys.executable, "-m", "hack.isolate", "--check"], cwd=ROOT, capture_output=True)
    assert check.returncode == (0 if isolate.available() else 1)
