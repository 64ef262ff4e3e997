"""Benchmark: what devctl's common commands cost to start (issue 28.7).

    python -m bench.devctl_start [--servers 500] [--runs 5]

kubesim holds N DevServers; in the same run, each command is started
--runs times as a user starts it (a new process) and its best CPU time (user + system of the
process and its children) and wall time are printed:

- `kubectl get devservers -n NS` (the baseline) and `devctl -n NS list`: target, devctl's CPU
  <= 3x kubectl's;
- `devctl --help`: target <= 0.15 s of wall time (click and devctl's group only: no command
  module, no kubernetes client);
- `devctl version --client` (no cluster), for scale.

Exit 1 names each target missed (`--no-check`: print only).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
NAMESPACE = "bench-devctl"
LIST_RATIO, HELP_SECONDS = 3.0, 0.15


def measure(cmd: list[str], env: dict, runs: int) -> dict:
    """Best CPU seconds (the child's user + system) and best wall seconds over `runs` starts."""
    cpu = wall = float("inf")
    out = ""
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        took = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode:
            raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        wall, out = min(wall, took), proc.stdout
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "lines": len(out.splitlines())}


def _servers(n: int) -> list[dict]:
    return [{"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
             "metadata": {"name": f"s{i:04d}", "namespace": NAMESPACE},
             "spec": {"flavor": "cpu-small", "owner": "bench@example.com"}} for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-check", action="store_true", help="print the figures only")
    args = ap.parse_args(argv)

    import yaml

    from kubesim.testing import KubeSim

    kubectl = str(BIN / "kubectl")  # make setup's pinned kubectl
    with tempfile.TemporaryDirectory(prefix="bench-devctl-") as tmp, KubeSim() as sim:
        env = dict(os.environ, KUBECONFIG=sim.kubeconfig, DEVCTL_CONFIG=os.path.join(tmp, "devctl.yaml"))
        env.pop("DEVCTL_NAMESPACE", None)
        subprocess.run([kubectl, "apply", "--server-side", "-f", str(ROOT / "config" / "crd" / "bases")],
                       env=env, check=True, capture_output=True)
        subprocess.run([kubectl, "wait", "--for=condition=Established", "crd/devservers.torchdev.io"],
                       env=env, check=True, capture_output=True)
        subprocess.run([kubectl, "create", "namespace", NAMESPACE], env=env, check=True, capture_output=True)
        manifest = pathlib.Path(tmp) / "servers.yaml"
        manifest.write_text(yaml.safe_dump_all(_servers(args.servers)))
        subprocess.run([kubectl, "create", "-f", str(manifest)], env=env, check=True, capture_output=True)

        devctl = str(BIN / "devctl")
        figures = {
            "kubectl get devservers": measure([kubectl, "get", "devservers", "-n", NAMESPACE], env, args.runs),
            "devctl list": measure([devctl, "-n", NAMESPACE, "list"], env, args.runs),
            "devctl --help": measure([devctl, "--help"], env, args.runs),
            "devctl version --client": measure([devctl, "version", "--client"], env, args.runs),
        }
    ratio = figures["devctl list"]["cpu_s"] / max(figures["kubectl get devservers"]["cpu_s"], 1e-3)
    result = {"servers": args.servers, "runs": args.runs, "figures": figures,
              "list_cpu_ratio": round(ratio, 2), "list_target": LIST_RATIO,
              "help_wall_s": figures["devctl --help"]["wall_s"], "help_target_s": HELP_SECONDS}
    print(json.dumps(result, indent=2))
    missed = []
    if ratio > LIST_RATIO:
        missed.append(f"devctl list costs {ratio:.1f}x kubectl's CPU (target <= {LIST_RATIO:g}x)")
    if result["help_wall_s"] > HELP_SECONDS:
        missed.append(f"devctl --help takes {result['help_wall_s']:.3f} s (target <= {HELP_SECONDS} s)")
    for line in missed:
        print("missed: " + line, file=sys.stderr)
    return 1 if missed and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
