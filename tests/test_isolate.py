"""hack/isolate.py: what a real tier gets to run beside another -- a loopback, port 8888, a
/tmp/ansible-operator and a TMPDIR of its own, and an address that is not loopback; or, where
namespaces are refused (not root), one line saying so."""
import os
import pathlib
import subprocess
import sys
import textwrap

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


def test_two_commands_hold_the_same_fixed_port_and_paths_side_by_side_or_it_says_why_not(tmp_path):
    if not isolate.available():
        # not root (no CAP_SYS_ADMIN): one line that says so and what to do, before anything runs
        res = subprocess.run([sys.executable, "-m", "hack.isolate", str(tmp_path / "a"), "--", "true"], cwd=ROOT,
                             capture_output=True, text=True)
        assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
        assert res.stderr.startswith("error: cannot give true a network namespace of its own") and "root" in res.stderr
        return
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
