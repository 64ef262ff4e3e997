"""Benchmark: one DevServer reconcile against the floor, and a burst of 50 DevServers.

    python -m bench.reconcile [--runs 5] [--burst 50] [--skip-burst]

1. Steady-state reconcile of an unchanged, Ready DevServer through the same
   ansible-runner path the operator uses, against the floor: a role with a single
   `kubernetes.core.k8s_info` task, measured alternately in the same run.
   Printed as a ratio (target <= 1.5).
2. 50 DevServers created at once with the local runtime running: seconds until all
   are Ready (target < 60 s on a 2-core machine). The runtime starts Ansible's Python
   processes from its fork server (torchdev_runtime/forkserver.py) unless
   TORCHDEV_FORKSERVER=0, which gives the figure for a fresh process per run, as under
   ansible-operator.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import subprocess
import tempfile
import types
import pathlib
import statistics
import sys
import time

import yaml

from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP as GROUP, API_VERSION, VERSION
from kubesim.testing import KubeSim

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Room for 64 cpu-small servers (2 cpu / 8Gi each).
NODES = ("cpu:8x{cpu:16,memory:64Gi,ephemeral-storage:400Gi,"
         "labels:{torchdev.io/node-pool:cpu,node.kubernetes.io/instance-type:m6i.4xlarge}}")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchmarkKeyForTorchdevReconcilexxxxxxxxxxxxx bench"


def _clients(sim: KubeSim):
    from kubernetes import client, config

    api = config.new_client_from_config(sim.kubeconfig)
    return client.ApiextensionsV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)


def _setup(sim: KubeSim, namespace: str):
    ext, custom, core = _clients(sim)
    for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
        ext.create_custom_resource_definition(yaml.safe_load(crd.read_text()))
    flavor = yaml.safe_load((ROOT / "config" / "samples" /
                             "torchdev_v1alpha1_devserverflavor_cpu-small.yaml").read_text())
    custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    return custom


def _devserver(name: str) -> dict:
    return {"apiVersion": API_VERSION, "kind": "DevServer", "metadata": {"name": name},
            "spec": {"owner": "bench@example.com", "flavor": "cpu-small", "sshPublicKeys": [KEY]}}


def _ready(obj: dict) -> bool:
    st = obj.get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in st.get("conditions") or []) and \
        st.get("observedGeneration") == obj["metadata"]["generation"]


def bench_single(runs: int) -> float:
    from torchdev_runtime.runner import AnsibleRunner
    from torchdev_runtime.runtime import Runtime, collections_environ
    from torchdev_runtime.watches import load_watches

    ns = "bench-single"
    with KubeSim(nodes=NODES) as sim:
        custom = _setup(sim, ns)
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", _devserver("one"))
        rt = Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig,
                     ansible_config=str(ROOT / "ansible.cfg")).start()
        try:
            sim.wait_for(lambda: _ready(custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, "devservers", "one")), 120, 0.1, "the DevServer to be Ready")
            rt.wait_idle(60)
        finally:
            rt.stop()
        cfg = str(ROOT / "ansible.cfg")
        # the FQCN roles resolved as the Runtime resolves them (ansible.cfg's collections_path)
        watches = load_watches(str(ROOT / "watches.yaml"), environ=collections_environ(cfg))
        devserver_watch = next(w for w in watches if w.gvk.kind == "DevServer")
        floor_watch = dataclasses.replace(devserver_watch, role=str(ROOT / "bench" / "roles" / "floor"))
        role_runner = AnsibleRunner(devserver_watch, sim.kubeconfig, ansible_config=cfg)
        floor_runner = AnsibleRunner(floor_watch, sim.kubeconfig, ansible_config=cfg)
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "one")
        role_t, floor_t = [], []
        writes_before = sim.writes()
        for i in range(runs + 1):  # the first pair warms caches and is dropped
            for runner, out in ((floor_runner, floor_t), (role_runner, role_t)):
                t0 = time.perf_counter()
                res = runner.run(obj, f"bench-{i}")
                if not res.ok:
                    raise SystemExit(f"reconcile failed: {res.summary()}")
                if i:
                    out.append(time.perf_counter() - t0)
        writes = sim.writes() - writes_before
        role_m, floor_m = statistics.median(role_t), statistics.median(floor_t)
        ratio = role_m / floor_m
        print(f"floor reconcile (one k8s_info task), median of {runs}: {floor_m:.3f} s")
        print(f"devserver reconcile (unchanged, Ready), median of {runs}: {role_m:.3f} s")
        print(f"ratio devserver/floor: {ratio:.2f} (target <= 1.5)")
        print(f"write requests during the unchanged reconciles: {writes}")
        return ratio


@contextlib.contextmanager
def _kubesim_process(nodes: str):
    """kubesim in its own process, as an API server is in production (no shared GIL)."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        proc = subprocess.Popen([sys.executable, "-m", "kubesim", "--port", "0",
                                 "--kubeconfig", kubeconfig, "--nodes", nodes])
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(kubeconfig):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("kubesim did not start")
                time.sleep(0.05)
            yield types.SimpleNamespace(kubeconfig=kubeconfig)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _wait_all_ready(custom, ns: str, n: int, timeout: float) -> None:
    """Until n DevServers of ns are Ready, through a watch (polling a list of 50 objects
    every 0.25 s would take CPU from what is measured)."""
    from kubernetes import watch

    ready: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(ready) < n:
        listed = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "devservers")
        ready = {o["metadata"]["name"] for o in listed["items"] if _ready(o)}
        rv = listed["metadata"]["resourceVersion"]
        stream = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns,
                                      "devservers", resource_version=rv, timeout_seconds=30)
        for event in stream:
            obj = event["object"]
            if event["type"] != "DELETED" and _ready(obj):
                ready.add(obj["metadata"]["name"])
            if len(ready) >= n:
                break
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {n} DevServers to be Ready ({len(ready)} are)")


def bench_burst(n: int, concurrency: int | None) -> float:
    from torchdev_runtime.runtime import Runtime

    ns = "bench-burst"
    with _kubesim_process(NODES) as sim:
        custom = _setup(sim, ns)
        rt = Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig,
                     ansible_config=str(ROOT / "ansible.cfg"),
                     max_concurrent_reconciles=concurrency).start()
        try:
            t0 = time.perf_counter()
            for i in range(n):
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                       _devserver(f"burst-{i:02d}"))

            _wait_all_ready(custom, ns, n, 600)
            elapsed = time.perf_counter() - t0
            counters = rt.counters("DevServer")
        finally:
            rt.stop()
        print(f"burst: {n} DevServers created at once, all Ready after {elapsed:.1f} s "
              f"(target < 60 s; {os.cpu_count()} CPUs, max concurrent reconciles "
              f"{rt.watches[0].max_concurrent_reconciles}; reconciles run: {counters.get('started')}; "
              f"fork server {'on' if rt.use_forkserver else 'off (TORCHDEV_FORKSERVER=0)'})")
        return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--skip-burst", action="store_true")
    ap.add_argument("--skip-single", action="store_true")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="max concurrent reconciles (default: the runtime's, the CPU count)")
    args = ap.parse_args(argv)
    os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    if not args.skip_single:
        bench_single(args.runs)
    if not args.skip_burst:
        bench_burst(args.burst, args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
