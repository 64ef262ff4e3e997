"""Benchmark: one DevServer reconcile against the floor, and a burst of 50 DevServers.

    python -m bench.reconcile [--runs 5] [--burst 50] [--skip-burst]
    python -m bench.reconcile --production [--repeat 2] [--burst 50]
    PYTHONPATH=tests python -m bench.reconcile --real [--burst 50]     (make bench-real)

1. Steady-state reconcile of an unchanged, Ready DevServer through the same
   ansible-runner path the operator uses, against the floor: a role with a single
   `kubernetes.core.k8s_info` task, measured alternately in the same run.
   Printed as a ratio (target <= 1.5).
2. 50 DevServers created at once with the local runtime running: seconds until all
   are Ready (target < 60 s on a 2-core machine). The runtime starts Ansible's Python
   processes from its fork server (torchdev_runtime/forkserver.py) unless
   TORCHDEV_FORKSERVER=0, which gives the figure for a fresh process per run, as under
   ansible-operator.
3. --production: that burst on the production path (a fresh process per run, as
   ansible-operator runs the roles) against its floor, alternately in the same run: the
   floor is the runs the burst's DevServers take at the least (two each: the create, then
   the Ready transition) of the one-task role of (1), fresh processes, over the burst's
   DevServers, as many at a time as the runtime's workers. Each pair is printed with its
   ratio, then the median ratio and the spread (target <= 1.5); then the burst with the fork
   servers, for comparison.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import resource
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


def _cpu() -> float:
    """CPU seconds (user + system) of this process and of its children that have ended: with
    other work on the machine, a figure that wall-clock time is not."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


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
        role_t, floor_t, role_cpu, floor_cpu = [], [], [], []
        writes_before = sim.writes()
        for i in range(runs + 1):  # the first pair warms caches and is dropped
            for runner, out, cpu in ((floor_runner, floor_t, floor_cpu), (role_runner, role_t, role_cpu)):
                t0, cpu0 = time.perf_counter(), _cpu()
                res = runner.run(obj, f"bench-{i}")
                if not res.ok:
                    raise SystemExit(f"reconcile failed: {res.summary()}")
                if i:
                    out.append(time.perf_counter() - t0)
                    cpu.append(_cpu() - cpu0)
        writes = sim.writes() - writes_before
        role_m, floor_m = statistics.median(role_t), statistics.median(floor_t)
        ratio = role_m / floor_m
        print(f"floor reconcile (one k8s_info task), median of {runs}: {floor_m:.3f} s, "
              f"CPU {statistics.median(floor_cpu):.3f} s")
        print(f"devserver reconcile (unchanged, Ready), median of {runs}: {role_m:.3f} s, "
              f"CPU {statistics.median(role_cpu):.3f} s")
        print(f"ratio devserver/floor: {ratio:.2f}, CPU "
              f"{statistics.median(role_cpu) / statistics.median(floor_cpu):.2f} (target <= 1.5)")
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
            while not os.path.exists(kubeconfig) or not os.path.getsize(kubeconfig):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("kubesim did not start")
                time.sleep(0.05)
            with open(kubeconfig, encoding="utf-8") as fh:
                url = yaml.safe_load(fh)["clusters"][0]["cluster"]["server"]
            yield types.SimpleNamespace(kubeconfig=kubeconfig, pid=proc.pid, url=url)
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


def _floor_runs(kubeconfig: str, objects: list[dict], runs_per_object: int,
                concurrency: int) -> tuple[float, float]:
    """Seconds and CPU seconds for ``runs_per_object`` runs of the floor role (bench/roles/floor: one
    kubernetes.core.k8s_info task) per object, fresh processes (no fork server), as many at a
    time as ``concurrency``: the least a burst of these objects could cost."""
    from concurrent.futures import ThreadPoolExecutor

    from torchdev_runtime.runner import AnsibleRunner
    from torchdev_runtime.runtime import collections_environ
    from torchdev_runtime.watches import load_watches

    cfg = str(ROOT / "ansible.cfg")
    watches = load_watches(str(ROOT / "watches.yaml"), environ=collections_environ(cfg))
    watch = next(w for w in watches if w.gvk.kind == "DevServer")
    runner = AnsibleRunner(dataclasses.replace(watch, role=str(ROOT / "bench" / "roles" / "floor")),
                           kubeconfig, ansible_config=cfg)
    jobs = [obj for _ in range(runs_per_object) for obj in objects]

    def one(i: int) -> None:
        res = runner.run(jobs[i], f"floor-{i}")
        if not res.ok:
            raise SystemExit(f"floor run failed: {res.summary()}")

    try:
        t0, cpu0 = time.perf_counter(), _cpu()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, range(len(jobs))))
        return time.perf_counter() - t0, _cpu() - cpu0
    finally:
        runner.close()


@dataclasses.dataclass
class Burst:
    seconds: float
    cpu: float  # CPU seconds of the operator: the runtime and every process it started
    reconciles: int
    floor_seconds: float | None = None
    floor_cpu: float | None = None


def bench_burst(n: int, concurrency: int | None, forkserver: bool | None = None,
                floor_runs_per_server: int = 0) -> Burst:
    """n DevServers created at once: the seconds until all are Ready, the operator's CPU
    seconds, the reconciles run, and with ``floor_runs_per_server`` the floor over the same
    DevServers (_floor_runs)."""
    from torchdev_runtime.runtime import Runtime

    ns = "bench-burst"
    with _kubesim_process(NODES) as sim:
        custom = _setup(sim, ns)
        cpu0 = _cpu()
        rt = Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig,
                     ansible_config=str(ROOT / "ansible.cfg"),
                     max_concurrent_reconciles=concurrency, forkserver=forkserver).start()
        try:
            t0 = time.perf_counter()
            for i in range(n):
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                       _devserver(f"burst-{i:02d}"))

            _wait_all_ready(custom, ns, n, 1800)
            elapsed = time.perf_counter() - t0
            counters = rt.counters("DevServer")
        finally:
            rt.stop()
        # after stop: the fork servers' children count once the servers have ended
        result = Burst(elapsed, _cpu() - cpu0, int(counters.get("started") or 0))
        workers = rt.watches[0].max_concurrent_reconciles
        print(f"burst: {n} DevServers created at once, all Ready after {elapsed:.1f} s, "
              f"operator CPU {result.cpu:.1f} s (target < 60 s; {os.cpu_count()} CPUs, max concurrent "
              f"reconciles {workers}; reconciles run: {result.reconciles}; "
              f"fork server {'on' if rt.use_forkserver else 'off (TORCHDEV_FORKSERVER=0)'})", flush=True)
        if floor_runs_per_server:
            objects = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "devservers")["items"]
            result.floor_seconds, result.floor_cpu = _floor_runs(sim.kubeconfig, objects, floor_runs_per_server, workers)
            print(f"floor: {floor_runs_per_server * len(objects)} runs of the one-task role, fresh processes, "
                  f"{workers} at a time: {result.floor_seconds:.1f} s, CPU {result.floor_cpu:.1f} s", flush=True)
        return result


def _spread(values: list[float], unit: str = "") -> str:
    return (f"median {statistics.median(values):.2f}{unit} (min {min(values):.2f}, max {max(values):.2f}, "
            f"n={len(values)})")


def bench_production(n: int, concurrency: int | None, repeat: int) -> float:
    """The burst with a fresh process per run against its floor, alternately (see the
    module's docstring, 3); the median ratio of the seconds."""
    pairs = []
    for i in range(repeat):
        burst = bench_burst(n, concurrency, forkserver=False, floor_runs_per_server=2)
        assert burst.floor_seconds and burst.floor_cpu
        pairs.append(burst)
        print(f"pair {i + 1}/{repeat}: burst {burst.seconds:.1f} s / floor {burst.floor_seconds:.1f} s = "
              f"{burst.seconds / burst.floor_seconds:.2f}; CPU {burst.cpu:.1f} s / {burst.floor_cpu:.1f} s = "
              f"{burst.cpu / burst.floor_cpu:.2f}", flush=True)
    ratios = [b.seconds / b.floor_seconds for b in pairs]
    print(f"production path, {n} DevServers: burst {_spread([b.seconds for b in pairs], ' s')}; "
          f"floor {_spread([b.floor_seconds for b in pairs], ' s')}", flush=True)
    print(f"ratio burst/floor: seconds {_spread(ratios)}; CPU seconds "
          f"{_spread([b.cpu / b.floor_cpu for b in pairs])} (target <= 1.5)", flush=True)
    return statistics.median(ratios)


def bench_real(n: int) -> float:
    """The burst on the real production path (issue 26.7): the real control plane (hack/cluster)
    and the real ansible-operator v1.39 binary with the image's Python (hack/ansible_operator),
    its default max concurrent reconciles (the CPU count), against the floor of (3) over the same
    DevServers and the same API server, then the local runtime's production burst for comparison.
    The seconds only: ansible-operator's CPU is not this process's to count while it runs."""
    try:
        from _real_tier import RealTier  # the e2e suite's real tier: PYTHONPATH=tests
    except ImportError:
        raise SystemExit("--real uses the e2e suite's real tier: run it as `make bench-real` "
                         "(PYTHONPATH=tests, the binaries built)") from None
    from kubernetes import client, config

    ns = "bench-burst"
    tier = RealTier(pathlib.Path(tempfile.mkdtemp(prefix="bench-real-")))
    try:
        cluster = tier.get(NODES, False)["cluster"]
        tier.runtime({}, (ROOT / "watches.yaml").read_text())
        api = config.new_client_from_config(str(cluster.kubeconfig))
        custom = client.CustomObjectsApi(api)
        client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        t0 = time.perf_counter()
        for i in range(n):
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", _devserver(f"burst-{i:02d}"))
        _wait_all_ready(custom, ns, n, 1800)
        elapsed = time.perf_counter() - t0
        workers = os.cpu_count() or 1
        print(f"real ansible-operator: {n} DevServers created at once, all Ready after {elapsed:.1f} s "
              f"(max concurrent reconciles {workers}, kube-apiserver 1.34 + kwok)", flush=True)
        objects = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "devservers")["items"]
        floor, _ = _floor_runs(str(cluster.kubeconfig), objects, 2, workers)
        print(f"floor: {2 * len(objects)} runs of the one-task role, fresh processes, {workers} at a time, "
              f"same API server: {floor:.1f} s", flush=True)
        print(f"ratio burst/floor (real ansible-operator): {elapsed / floor:.2f} (target <= 1.5)", flush=True)
    finally:
        tier.close()
    return elapsed / floor


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--skip-burst", action="store_true")
    ap.add_argument("--skip-single", action="store_true")
    ap.add_argument("--production", action="store_true",
                    help="the burst with a fresh process per run against its floor (3), then the "
                         "burst with the fork servers; nothing else")
    ap.add_argument("--repeat", type=int, default=2, help="--production: burst/floor pairs")
    ap.add_argument("--real", action="store_true",
                    help="--production with the real ansible-operator on the real control plane, then "
                         "the local runtime's production burst (make bench-real)")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="max concurrent reconciles (default: the runtime's, the CPU count)")
    args = ap.parse_args(argv)
    os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    if args.real:
        bench_real(args.burst)
        bench_production(args.burst, args.concurrency, 1)
        return 0
    if args.production:
        bench_production(args.burst, args.concurrency, args.repeat)
        bench_burst(args.burst, args.concurrency, forkserver=True)
        return 0
    if not args.skip_single:
        bench_single(args.runs)
    if not args.skip_burst:
        bench_burst(args.burst, args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
