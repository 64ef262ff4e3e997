"""Shell completion with names (issue 28.3): `devctl completion bash|zsh|fish` prints the script;
bash, with that script sourced, completes commands, flags, and the names of servers, flavors,
jobs and users read from the cluster of the command line (kubesim here); a cluster that does not
answer completes nothing, quickly, and prints no error."""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent  # the venv's devctl console script


def _bash() -> str:
    found = shutil.which("bash")
    if not found:
        pytest.fail("bash not found: this test sources the completion script in a real bash", pytrace=False)
    return found


def complete(line: str) -> list[str]:
    """What bash offers for ``line`` (its last word being completed), with devctl's script sourced."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    script = (f"source <(devctl completion bash)\n"
              f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              f"_devctl_completion devctl\n"
              f"printf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", DEVCTL_CONFIG=os.devnull)
    env.pop("KUBECONFIG", None)
    proc = subprocess.run([_bash(), "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _devctl_completion devctl"),
                                           ("zsh", "#compdef devctl"), ("fish", "complete --no-files --command devctl")])
def test_the_script(devctl, shell, marker):
    result = devctl("completion", shell, namespace=False)
    assert result.exit_code == 0 and marker in result.stdout and "_DEVCTL_COMPLETE" in result.stdout


def test_commands_and_flags():
    assert {"create", "completion", "ssh", "reserve"} <= set(complete("devctl "))
    assert complete("devctl cre") == ["create"]
    assert {"--flavor", "--wait", "--timeout"} <= set(complete("devctl create x --"))


def test_names_from_the_cluster(sim, ns, cluster):
    for name in ("alpha", "alps", "beta"):
        cluster.custom.create_namespaced_custom_object("torchdev.io", "v1alpha1", ns, "devservers", {
            "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "metadata": {"name": name},
            "spec": {"owner": "jane@example.com", "flavor": "cpu-small"}})
    cfg = f"--kubeconfig {sim.kubeconfig} -n {ns}"
    assert complete(f"devctl {cfg} ssh al") == ["alpha", "alps"]
    assert complete(f"devctl get --kubeconfig {sim.kubeconfig} -n {ns} ") == ["alpha", "alps", "beta"]
    assert complete(f"devctl {cfg} delete b") == ["beta"]
    assert "cpu-small" in complete(f"devctl {cfg} create new --flavor cpu")
    assert complete(f"devctl --kubeconfig {sim.kubeconfig} -n other-ns get ") == []  # another namespace's


def test_a_cluster_that_does_not_answer_completes_nothing_quickly(tmp_path):
    """A server that accepts and never answers: completion gives up within its timeout, silently."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    port = silent.getsockname()[1]
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u, namespace: dev-x}}}}]
current-context: c
""")
    try:
        start = time.monotonic()
        assert complete(f"devctl --kubeconfig {cfg} ssh ") == []
        assert time.monotonic() - start < 15  # the interpreter's start-up and the 2 s read timeout
    finally:
        silent.close()
