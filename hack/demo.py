#!/usr/bin/env python3
"""`make demo`: a DevServer from nothing to Ready, then stop what we started.

Cluster: the one in $KUBECONFIG when it is set and answers; otherwise (the
usual case) an embedded kubesim with a GPU node pool. Then: install the CRDs,
run the operator with the local runtime, create the sample flavors and a
standalone DevServer, wait for Ready, show `devctl list` and `devctl get`.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
# The node pools the sample flavors select (cpu, g5.2xlarge, p5.48xlarge).
NODES = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
NAMESPACE = "dev-demo"
SERVER = "demo"
FLAVOR = "gpu-a10g-1"


def step(msg: str) -> None:
    print(f"\n==> {msg}", flush=True)


def run(*cmd: str, env: dict[str, str], check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    if not quiet:
        print("$ " + " ".join(c if " " not in c else repr(c) for c in cmd), flush=True)
    return subprocess.run(cmd, env=env, check=check, text=True,
                          stdout=subprocess.PIPE if quiet else None,
                          stderr=subprocess.STDOUT if quiet else None)


def cluster_reachable(env: dict[str, str]) -> bool:
    if not os.environ.get("KUBECONFIG"):
        return False
    r = subprocess.run([str(BIN / "kubectl"), "version", "--request-timeout=3s", "-o", "json"],
                       env=env, capture_output=True, text=True)
    return r.returncode == 0


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="leave the cluster and operator running")
    ap.add_argument("--timeout", type=int, default=120, help="seconds to wait for Ready")
    args = ap.parse_args()

    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DEVCTL_CONFIG", str(ROOT / ".demo" / "devctl.yaml"))
    workdir = ROOT / ".demo"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    sim = operator = None
    try:
        if cluster_reachable(env):
            step(f"Using the cluster in $KUBECONFIG ({env['KUBECONFIG']})")
        else:
            step("No cluster configured: starting the embedded simulator (kubesim) with a GPU node pool")
            t0 = time.monotonic()
            sim, kubeconfig = start_kubesim(workdir)
            env["KUBECONFIG"] = kubeconfig
            print(f"kubesim ready in {time.monotonic() - t0:.2f}s; KUBECONFIG={kubeconfig}")
            run(str(BIN / "kubectl"), "get", "nodes", "-L", "node.kubernetes.io/instance-type", env=env)

        step("Installing the CRDs")
        run(str(BIN / "kubectl"), "apply", "--server-side", "-k", str(ROOT / "config" / "crd"), env=env)
        run(str(BIN / "kubectl"), "wait", "--for=condition=Established", "--timeout=30s",
            "crd/devservers.torchdev.io", "crd/devserverflavors.torchdev.io", env=env)

        step("Starting the operator (local runtime; watches.yaml -> roles/)")
        operator = subprocess.Popen([str(BIN / "torchdev-runtime"), "--watches-file",
                                     str(ROOT / "watches.yaml"), "--kubeconfig", env["KUBECONFIG"]],
                                    env=env, stdout=open(workdir / "operator.log", "w"),
                                    stderr=subprocess.STDOUT, cwd=ROOT)

        step("Creating the sample flavors and a namespace for the user")
        for f in sorted((ROOT / "config" / "samples").glob("torchdev_v1alpha1_devserverflavor*.yaml")):
            run(str(BIN / "kubectl"), "apply", "--server-side", "-f", str(f), env=env)
        ns_file = workdir / "namespace.yaml"
        ns_file.write_text(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n")
        run(str(BIN / "kubectl"), "apply", "--server-side", "-f", str(ns_file), env=env)
        run(str(BIN / "devctl"), "flavors", env=env)

        step(f"Creating a standalone DevServer '{SERVER}' and waiting for Ready")
        t0 = time.monotonic()
        key = workdir / "id_ed25519.pub"
        key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoKeyForTorchdevDemoOnlyxxxxxxxxxxxx demo@torchdev\n")
        r = run(str(BIN / "devctl"), "-n", NAMESPACE, "create", SERVER, "--flavor", FLAVOR,
                "--owner", "demo@example.com", "--ssh-key-file", str(key), "--wait",
                "--timeout", str(args.timeout), env=env, check=False)
        if r.returncode != 0:
            print("\n--- operator log (tail) ---", file=sys.stderr)
            print("".join((workdir / "operator.log").read_text().splitlines(True)[-60:]), file=sys.stderr)
            return 1
        print(f"Ready in {time.monotonic() - t0:.1f}s")

        step("devctl list")
        run(str(BIN / "devctl"), "-n", NAMESPACE, "list", env=env)
        step(f"devctl get {SERVER}")
        run(str(BIN / "devctl"), "-n", NAMESPACE, "get", SERVER, env=env)
        step("What the operator created")
        run(str(BIN / "kubectl"), "-n", NAMESPACE, "get", "statefulsets,services,pvc,pods", env=env)
        step(f"devctl ssh {SERVER} --print")
        run(str(BIN / "devctl"), "-n", NAMESPACE, "ssh", SERVER, "--print", env=env, check=False)
        if args.keep:
            print(f"\nLeft running (--keep). KUBECONFIG={env['KUBECONFIG']}")
            sim = operator = None
        return 0
    finally:
        step("Stopping what the demo started")
        stop(operator, "operator")
        stop(sim, "kubesim")
        print("done")


if __name__ == "__main__":
    sys.exit(main())
