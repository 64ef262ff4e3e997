"""A fake ``kubectl exec`` for the devctl run tests: runs the command *locally*, as if in the pod.

    kubectl [--kubeconfig PATH] [--context C] exec [-i] -n NS POD [-c CONTAINER] -- CMD...

It reads POD from the simulator named by the kubeconfig (plain HTTP, no kubernetes
import: it starts fast), builds the container's env the way the kubelet would (``value``
as is; downward-API ``fieldRef`` of ``metadata.labels['...']``, ``metadata.name`` and
``metadata.namespace`` from the pod), maps MASTER_ADDR (pod 0's cluster DNS name) to
127.0.0.1 and MASTER_PORT to ``$FAKE_KUBECTL_MASTER_PORT`` (one free port per test), and
execs CMD with that env. ``devrun`` is found on PATH (the tests put a shim there that runs
the real launcher). With ``$FAKE_KUBECTL_PIDS`` set, it records its pid there (the pid
stays the same after exec) as ``<pod>.<pid>``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.request

import yaml

FIELD_RE = re.compile(r"^metadata\.labels\['([^']+)'\]$")


def fail(message: str, code: int = 1) -> None:
    sys.stderr.write(message + "\n")
    sys.exit(code)


def parse(argv: list[str]) -> dict:
    opts = {"kubeconfig": os.environ.get("KUBECONFIG"), "namespace": "default", "container": None}
    if "--" not in argv:
        fail("error: fake kubectl only supports 'exec ... -- CMD'")
    cut = argv.index("--")
    head, opts["command"] = argv[:cut], argv[cut + 1:]
    positional = []
    i = 0
    while i < len(head):
        word = head[i]
        if word in ("--kubeconfig", "--context", "-n", "--namespace", "-c", "--container"):
            key = {"--kubeconfig": "kubeconfig", "--context": "context", "-n": "namespace",
                   "--namespace": "namespace", "-c": "container", "--container": "container"}[word]
            opts[key] = head[i + 1]
            i += 2
            continue
        if word.startswith("-"):  # -i, -t, --stdin...
            i += 1
            continue
        positional.append(word)
        i += 1
    if positional[:1] != ["exec"] or len(positional) != 2:
        fail(f"error: fake kubectl: unsupported command line {argv!r}")
    opts["pod"] = positional[1]
    return opts


def get_pod(kubeconfig: str, namespace: str, pod: str) -> dict:
    with open(kubeconfig) as fh:
        server = yaml.safe_load(fh)["clusters"][0]["cluster"]["server"].rstrip("/")
    try:
        with urllib.request.urlopen(f"{server}/api/v1/namespaces/{namespace}/pods/{pod}", timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            fail(f'Error from server (NotFound): pods "{pod}" not found')
        fail(f"Error from server: {exc}")
    return {}  # pragma: no cover


def pod_env(pod: dict, container: dict) -> dict[str, str]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    out: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            out[item["name"]] = str(item["value"])
            continue
        path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        match = FIELD_RE.match(path)
        if match:
            out[item["name"]] = labels.get(match.group(1), "")
        elif path == "metadata.name":
            out[item["name"]] = meta.get("name", "")
        elif path == "metadata.namespace":
            out[item["name"]] = meta.get("namespace", "")
    return out


def main() -> None:
    opts = parse(sys.argv[1:])
    pod = get_pod(opts["kubeconfig"], opts["namespace"], opts["pod"])
    containers = (pod.get("spec") or {}).get("containers") or []
    name = opts["container"] or containers[0]["name"]
    container = next((c for c in containers if c.get("name") == name), None)
    if container is None:
        fail(f'error: container {name} is not valid for pod {opts["pod"]}')
    env = dict(os.environ)
    env.update(pod_env(pod, container))
    if "MASTER_ADDR" in env:
        env["MASTER_ADDR"] = "127.0.0.1"
    if os.environ.get("FAKE_KUBECTL_MASTER_PORT") and "MASTER_PORT" in env:
        env["MASTER_PORT"] = os.environ["FAKE_KUBECTL_MASTER_PORT"]
    if "TORCHDEV_RDZV_ENDPOINT" in env:
        env["TORCHDEV_RDZV_ENDPOINT"] = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    pids = os.environ.get("FAKE_KUBECTL_PIDS")
    if pids:
        open(os.path.join(pids, f"{opts['pod']}.{os.getpid()}"), "w").close()
    command = opts["command"]
    if not command:
        fail("error: you must specify at least one command for the container")
    sys.stdout.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        fail(f"OCI runtime exec failed: exec: {command[0]!r}: {exc}", 126)


if __name__ == "__main__":
    main()
