#!/usr/bin/env python3
"""`make demo`: a DevServer from nothing to Ready, then stop what we started.

Cluster: the embedded simulator (kubesim) with a GPU node pool, unless $KUBECONFIG is set
and answers. On kubesim everything goes away with it. On a real cluster the demo first says
what it will create (the CRDs and sample flavors that are not there yet, a namespace of its
own, a DevServer) and asks, or needs --yes and refuses without a terminal; it runs the
operator on this machine watching only its namespace (and the flavors), and removes what it
created when it ends unless --keep. Then, on either: install the CRDs, run the operator
with the local runtime, create the sample flavors and a standalone DevServer, wait for
Ready, show `devctl list` and `devctl get`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
# The node pools the sample flavors select (cpu, g5.2xlarge, p5.48xlarge).
NODES = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
SIM_NAMESPACE = "dev-demo"
SERVER = "demo"
DEFAULT_FLAVOR = "gpu-a10g-1"
CRD_DIR = ROOT / "config" / "crd" / "bases"
SAMPLES = ROOT / "config" / "samples"


def step(msg: str) -> None:
    print(f"\n==> {msg}", flush=True)


def run(*cmd: str, env: dict[str, str], check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    if not quiet:
        print("$ " + " ".join(c if " " not in c else repr(c) for c in cmd), flush=True)
    return subprocess.run(cmd, env=env, check=check, text=True,
                          stdout=subprocess.PIPE if quiet else None,
                          stderr=subprocess.STDOUT if quiet else None)


def kubectl(*args: str, env: dict[str, str], check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    return run(str(BIN / "kubectl"), *args, env=env, check=check, quiet=quiet)


def cluster_reachable(env: dict[str, str]) -> bool:
    if not env.get("KUBECONFIG"):
        return False
    r = subprocess.run([str(BIN / "kubectl"), "version", "--request-timeout=3s", "-o", "json"],
                       env=env, capture_output=True, text=True)
    return r.returncode == 0


def _docs(paths) -> list[dict]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def crds() -> list[str]:
    return sorted(d["metadata"]["name"] for d in _docs(sorted(CRD_DIR.glob("*.yaml"))))


def flavor_files() -> dict[str, pathlib.Path]:
    return {yaml.safe_load(p.read_text())["metadata"]["name"]: p
            for p in sorted(SAMPLES.glob("torchdev_v1alpha1_devserverflavor*.yaml"))}


def existing(kind: str, names: list[str], env: dict[str, str]) -> set[str]:
    """Which of ``names`` (cluster-scoped ``kind``) exist; a kind that is not served has none."""
    r = subprocess.run([str(BIN / "kubectl"), "get", kind, "-o", "json", "--ignore-not-found"],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return set()
    return {i["metadata"]["name"] for i in json.loads(r.stdout).get("items", [])} & set(names)


@dataclass
class Plan:
    """What the demo creates on a real cluster, and so removes at the end."""
    context: str
    namespace: str
    flavor: str
    crds: list[str] = field(default_factory=list)
    flavors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"make demo is about to create, on the cluster of $KUBECONFIG ({self.context}):"]
        lines.append("  CustomResourceDefinitions (cluster-wide): " + (", ".join(self.crds) or "none (installed already)"))
        lines.append("  DevServerFlavors (cluster-wide): " + (", ".join(self.flavors) or "none (they exist already)"))
        lines.append(f"  namespace {self.namespace} (its own) with the DevServer {SERVER!r} of flavor {self.flavor} "
                     "(a StatefulSet, Services, a home PVC; it needs a node that fits the flavor)")
        lines.append(f"and run the operator on this machine (torchdev-runtime), watching only {self.namespace} "
                     "and the flavors.")
        lines.append("It removes exactly these when it ends (unless --keep); nothing that existed before is changed.")
        return "\n".join(lines)


def plan_for(env: dict[str, str], flavor: str) -> Plan:
    ctx = subprocess.run([str(BIN / "kubectl"), "config", "current-context"], env=env,
                         capture_output=True, text=True).stdout.strip() or "current context"
    flavors = flavor_files()
    return Plan(context=ctx, namespace=f"torchdev-demo-{secrets.token_hex(3)}", flavor=flavor,
                crds=[n for n in crds() if n not in existing("crd", crds(), env)],
                flavors=[n for n in flavors if n not in existing("devserverflavors.torchdev.io", list(flavors), env)])


def confirm(plan: Plan, yes: bool, interactive: bool, ask=input) -> None:
    """Raises SystemExit unless the user agrees (--yes, or 'y' on a terminal)."""
    print(plan.describe(), flush=True)
    if yes:
        return
    if not interactive:
        raise SystemExit("error: refusing to install into a real cluster without confirmation (stdin is not a "
                         "terminal): run `make demo DEMO_ARGS=--yes` to agree, or unset KUBECONFIG to use the "
                         "embedded simulator")
    if ask("Proceed? [y/N] ").strip().lower() not in ("y", "yes"):
        raise SystemExit("aborted: nothing was created")


def start_kubesim(workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "--port", "0",
                             "--kubeconfig", str(kubeconfig), "--nodes", NODES],
                            stdout=open(workdir / "kubesim.log", "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            print((workdir / "kubesim.log").read_text(), file=sys.stderr)
            raise SystemExit("error: kubesim did not start")
        time.sleep(0.05)
    return proc, str(kubeconfig)


def stop(proc: subprocess.Popen | None, name: str) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        print(f"{name} did not stop in time; killing it", file=sys.stderr)
        proc.kill()
        proc.wait()


def remove(plan: Plan, env: dict[str, str]) -> None:
    """Delete what the demo created on a real cluster: the namespace (with the DevServer and
    its volume), the flavors it created, then the CRDs it installed (no other custom resources
    of them existed before)."""
    kubectl("delete", "namespace", plan.namespace, "--ignore-not-found", "--wait=false", env=env, check=False)
    if plan.flavors:
        kubectl("delete", "devserverflavors.torchdev.io", *plan.flavors, "--ignore-not-found", env=env, check=False)
    if plan.crds:
        kubectl("delete", "crd", *plan.crds, "--ignore-not-found", "--wait=false", env=env, check=False)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="leave the cluster, operator and demo objects in place")
    ap.add_argument("--yes", action="store_true",
                    help="on a real cluster ($KUBECONFIG): agree to what the demo will create without asking")
    ap.add_argument("--flavor", default=DEFAULT_FLAVOR, help="the DevServer's flavor (default %(default)s)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds to wait for Ready")
    return ap.parse_args(argv)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def show_metrics(port: int, runtime_port: int) -> None:
    """The exporter's DevServer and GPU series (it watches the cluster; a scrape is instant) and
    the operator's DevServer reconciles."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{runtime_port}/metrics", timeout=5) as response:
            print("\n".join(line for line in response.read().decode().splitlines()
                            if line.startswith('controller_runtime_reconcile_total{controller="devserver-controller"')))
    except OSError as exc:
        print(f"(the operator's reconcile metrics: {exc})")

    for _ in range(50):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            time.sleep(0.2)
            continue
        lines = [line for line in text.splitlines()
                 if line.startswith(("torchdev_devservers{", "torchdev_gpus_requested{", "torchdev_cost_per_hour"))]
        if any(line.startswith("torchdev_devservers{") and 'phase="Running"' in line for line in lines):
            print("\n".join(lines))
            return
        time.sleep(0.2)
    print("(the exporter has not reported the server yet; see .demo/exporter.log)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DEVCTL_CONFIG", str(ROOT / ".demo" / "devctl.yaml"))
    workdir = ROOT / ".demo"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    sim = operator = exporter = plan = None
    namespace = SIM_NAMESPACE
    try:
        if cluster_reachable(env):
            step(f"Using the cluster in $KUBECONFIG ({env['KUBECONFIG']})")
            proposed = plan_for(env, args.flavor)
            confirm(proposed, args.yes, sys.stdin.isatty())
            plan, namespace = proposed, proposed.namespace
        else:
            step("No cluster configured: starting the embedded simulator (kubesim) with a GPU node pool")
            t0 = time.monotonic()
            sim, kubeconfig = start_kubesim(workdir)
            env["KUBECONFIG"] = kubeconfig
            print(f"kubesim ready in {time.monotonic() - t0:.2f}s; KUBECONFIG={kubeconfig}")
            kubectl("get", "nodes", "-L", "node.kubernetes.io/instance-type", env=env)

        step("Installing the CRDs")
        kubectl("apply", "--server-side", "-k", str(ROOT / "config" / "crd"), env=env)
        kubectl("wait", "--for=condition=Established", "--timeout=30s", *(f"crd/{n}" for n in crds()), env=env)

        runtime_metrics_port = free_port()
        step("Starting the operator (local runtime; watches.yaml -> roles/; reconcile metrics on "
             f"http://127.0.0.1:{runtime_metrics_port}/metrics)")
        operator = subprocess.Popen([str(BIN / "torchdev-runtime"), "--watches-file",
                                     str(ROOT / "watches.yaml"), "--kubeconfig", env["KUBECONFIG"],
                                     "--metrics-bind-address", f"127.0.0.1:{runtime_metrics_port}"]
                                    + (["--namespace", namespace] if plan else []),
                                    env=env, stdout=open(workdir / "operator.log", "w"),
                                    stderr=subprocess.STDOUT, cwd=ROOT)

        metrics_port = free_port()
        step(f"Starting the metrics exporter (torchdev-exporter, http://127.0.0.1:{metrics_port}/metrics)")
        exporter = subprocess.Popen([str(BIN / "torchdev-exporter"), "--kubeconfig", env["KUBECONFIG"],
                                     "--address", "127.0.0.1", "--port", str(metrics_port)],
                                    env=env, stdout=open(workdir / "exporter.log", "w"),
                                    stderr=subprocess.STDOUT, cwd=ROOT)

        step("Creating the sample flavors and a namespace for the user")
        files = flavor_files()
        for name in (plan.flavors if plan else files):
            kubectl("apply", "--server-side", "-f", str(files[name]), env=env)
        kubectl("create", "namespace", namespace, env=env)
        run(str(BIN / "devctl"), "flavors", env=env)

        step(f"Creating a standalone DevServer '{SERVER}' and waiting for Ready")
        t0 = time.monotonic()
        key = workdir / "id_ed25519.pub"
        key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoKeyForTorchdevDemoOnlyxxxxxxxxxxxx demo@torchdev\n")
        r = run(str(BIN / "devctl"), "-n", namespace, "create", SERVER, "--flavor", args.flavor,
                "--owner", "demo@example.com", "--ssh-key-file", str(key), "--wait",
                "--timeout", str(args.timeout), env=env, check=False)
        if r.returncode != 0:
            print("\n--- operator log (tail) ---", file=sys.stderr)
            print("".join((workdir / "operator.log").read_text().splitlines(True)[-60:]), file=sys.stderr)
            return 1
        print(f"Ready in {time.monotonic() - t0:.1f}s")

        step("devctl list")
        run(str(BIN / "devctl"), "-n", namespace, "list", env=env)
        step(f"devctl get {SERVER}")
        run(str(BIN / "devctl"), "-n", namespace, "get", SERVER, env=env)
        step("What the operator created")
        kubectl("-n", namespace, "get", "statefulsets,services,pvc,pods", env=env)
        step(f"devctl ssh {SERVER} --print")
        run(str(BIN / "devctl"), "-n", namespace, "ssh", SERVER, "--print", env=env, check=False)
        step("torchdev's metrics (a few of them)")
        show_metrics(metrics_port, runtime_metrics_port)
        if args.keep:
            print(f"\nLeft running (--keep). KUBECONFIG={env['KUBECONFIG']}"
                  + (f"; namespace {namespace}" if plan else ""))
            sim = operator = exporter = plan = None
        return 0
    finally:
        step("Stopping what the demo started")
        stop(exporter, "exporter")
        stop(operator, "operator")
        if plan is not None:
            remove(plan, env)
        stop(sim, "kubesim")
        print("done")


if __name__ == "__main__":
    sys.exit(main())
