"""Benchmark: many DevServers steady in kubesim (issue 17, item 6).

    python -m bench.scale [--servers 1000] [--rest 330] [--changes 3] [--lists 5]

kubesim and the operator (torchdev-runtime with its fork servers, what `make run` starts when
ansible-operator is not installed) each run in their own process, as in production; the
operator serves its reconcile metrics (torchdev_runtime_reconciles_total by cause).

1. Baseline, in the same run: the operator with one DevServer, Ready and idle: its memory,
   the time for one change of that DevServer to be reconciled.
2. --servers DevServers (cpu-small) created at once in two namespaces, half each, until all
   are Ready and the operator has been idle for a while.
3. At rest for --rest seconds (longer than the DevServerFlavor watch's 5m reconcilePeriod,
   so that its periodic runs are counted): reconciles per minute by kind and cause, API
   requests per minute by verb and resource, write requests; every reconcile must have a
   cause (the goal: none beyond lifecycle deadlines).
4. The operator's memory: RSS of the runtime process and of its fork servers (and whatever
   they run then), against (1); kubesim's RSS.
5. `devctl list` of one namespace (half the servers), median of --lists, against
   `kubectl get devservers` of the same namespace (the server's table) and `devctl version`
   (devctl's start-up), measured alternately (goal <= 0.6 s for 500).
6. One change (a DevServer's spec.env) reconciled with all the servers present: seconds from
   the PATCH until the status says that generation is Ready, median of --changes, against (1).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from typing import Any

import yaml

from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP as GROUP, VERSION
from bench.reconcile import ROOT, _devserver, _kubesim_process, _ready

# Room for 1,000+ cpu-small servers (2 cpu, 8Gi, 20Gi of ephemeral storage each): 25 a node.
NODES = ("cpu:48x{cpu:64,memory:256Gi,ephemeral-storage:1Ti,pods:110,"
         "labels:{torchdev.io/node-pool:cpu,node.kubernetes.io/instance-type:m6i.16xlarge}}")
NAMESPACES = ("scale-a", "scale-b")
BIN = os.path.dirname(sys.executable)


# -- the cluster and the operator ------------------------------------------------------------

def _clients(kubeconfig: str):
    from kubernetes import client, config

    api = config.new_client_from_config(kubeconfig)
    return client.ApiextensionsV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)


def _install(kubeconfig: str) -> Any:
    ext, custom, core = _clients(kubeconfig)
    for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
        ext.create_custom_resource_definition(yaml.safe_load(crd.read_text()))
    for flavor in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
        custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", yaml.safe_load(flavor.read_text()))
    for ns in NAMESPACES:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return custom


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Operator:
    """torchdev-runtime in its own process, with its metrics endpoint."""

    def __init__(self, kubeconfig: str, log: str):
        self.port = _free_port()
        self.log = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchdev_runtime", "--watches-file", str(ROOT / "watches.yaml"),
             "--kubeconfig", kubeconfig, "--ansible-config", str(ROOT / "ansible.cfg"),
             "--metrics-bind-address", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.metrics()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the operator did not start (see {log})")
                time.sleep(0.2)

    def metrics(self) -> dict[str, Any]:
        """{"reconciles": {(controller, cause): n}, "active": n, "total": n}."""
        from prometheus_client.parser import text_string_to_metric_families

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read().decode()
        out: dict[str, Any] = {"reconciles": Counter(), "active": 0, "total": 0}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "torchdev_runtime_reconciles_total":
                    out["reconciles"][(sample.labels["controller"], sample.labels["cause"])] += int(sample.value)
                elif sample.name == "controller_runtime_active_workers":
                    out["active"] += int(sample.value)
                elif sample.name == "controller_runtime_reconcile_total":
                    out["total"] += int(sample.value)
        return out

    def wait_idle(self, quiet: float, timeout: float) -> float:
        """Until no reconcile has started or run for ``quiet`` seconds; the seconds waited."""
        t0 = time.monotonic()
        last, since = None, time.monotonic()
        while time.monotonic() - t0 < timeout:
            m = self.metrics()
            state = (sum(m["reconciles"].values()), m["total"], m["active"])
            if state != last or m["active"]:
                last, since = state, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return time.monotonic() - t0
            time.sleep(1.0)
        raise SystemExit(f"the operator was not idle for {quiet} s within {timeout} s")

    def rss_mib(self) -> tuple[float, int]:
        """RSS of the runtime process and of its descendants (fork servers, what they run), MiB;
        the number of processes."""
        pids = [self.proc.pid, *_descendants(self.proc.pid)]
        return sum(_rss_kib(p) for p in pids) / 1024, len(pids)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _kubesim_metrics(url: str) -> Counter:
    data = json.loads(urllib.request.urlopen(f"{url}/kubesim/metrics", timeout=30).read())
    return Counter({key: n for key, n in data["requests"].items()})


# -- DevServers -------------------------------------------------------------------------------

def _create(custom, n: int, first: int = 0) -> list[tuple[str, str]]:
    keys = []
    for i in range(first, first + n):
        ns = NAMESPACES[i % len(NAMESPACES)]
        name = f"s{i:04d}"
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", _devserver(name))
        keys.append((ns, name))
    return keys


def _wait_ready(custom, n: int, timeout: float, progress: float = 60.0) -> float:
    """Until n DevServers (every namespace) are Ready, through a watch; the seconds."""
    from kubernetes import watch

    t0 = time.monotonic()
    shown = t0
    ready: set[tuple[str, str]] = set()
    while True:
        listed = custom.list_cluster_custom_object(GROUP, VERSION, "devservers")
        ready = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed["items"] if _ready(o)}
        if len(ready) >= n:
            return time.monotonic() - t0
        stream = watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, "devservers",
                                      resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=60)
        for event in stream:
            obj = event["object"]
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if event["type"] != "DELETED" and _ready(obj):
                ready.add(key)
            else:
                ready.discard(key)
            if len(ready) >= n:
                return time.monotonic() - t0
            if time.monotonic() - shown > progress:
                shown = time.monotonic()
                print(f"  ... {len(ready)}/{n} Ready after {shown - t0:.0f} s", flush=True)
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"timed out: {len(ready)} of {n} DevServers Ready")


def _change_latency(custom, key: tuple[str, str], value: str, timeout: float = 600) -> float:
    """Seconds from a spec change of one DevServer until its status says that generation is Ready."""
    ns, name = key
    t0 = time.monotonic()
    obj = custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name,
                                                {"spec": {"env": [{"name": "BENCH_CHANGE", "value": value}]}})
    generation = obj["metadata"]["generation"]
    while time.monotonic() - t0 < timeout:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name)
        if obj["metadata"]["generation"] == generation and _ready(obj):
            return time.monotonic() - t0
        time.sleep(0.05)
    raise SystemExit(f"the change of {ns}/{name} was not reconciled within {timeout} s")


def _changes(custom, key, count: int, tag: str) -> list[float]:
    return [_change_latency(custom, key, f"{tag}-{i}") for i in range(count)]


# -- listing ------------------------------------------------------------------------------------

def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def bench_list(kubeconfig: str, ns: str, n: int, runs: int) -> dict[str, list[float]]:
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    commands = {
        "devctl list": [os.path.join(BIN, "devctl"), "list", "-n", ns],
        "kubectl get devservers": [os.path.join(BIN, "kubectl"), "get", "devservers", "-n", ns],
        "devctl version": [os.path.join(BIN, "devctl"), "version"],
    }
    times: dict[str, list[float]] = {k: [] for k in commands}
    for i in range(runs + 1):  # the first round warms caches and is dropped
        for label, cmd in commands.items():
            elapsed, out = _timed(cmd, env)
            if label == "devctl list":
                rows = [line for line in out.splitlines()[1:] if line.strip()]
                if len(rows) != n:
                    raise SystemExit(f"devctl list printed {len(rows)} servers, not {n}")
            if i:
                times[label].append(elapsed)
    return times


# -- the run --------------------------------------------------------------------------------------

def _spread(values: list[float], unit: str = "") -> str:
    return (f"median {statistics.median(values):.2f}{unit} (min {min(values):.2f}, max {max(values):.2f}, "
            f"n={len(values)})")


def _per_minute(counts: Counter, seconds: float) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{k}: {v * 60 / seconds:.1f}/min ({v})" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, default=1000)
    ap.add_argument("--rest", type=float, default=330.0, help="seconds at rest measured")
    ap.add_argument("--changes", type=int, default=3, help="changes timed, with one server and with all")
    ap.add_argument("--lists", type=int, default=5, help="devctl list runs")
    ap.add_argument("--log", default="/tmp/bench-scale-operator.log", help="the operator's log")
    args = ap.parse_args(argv)
    os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))

    with _kubesim_process(NODES) as sim:
        custom = _install(sim.kubeconfig)
        operator = Operator(sim.kubeconfig, args.log)
        try:
            # 1. the baseline: one DevServer
            (one,) = _create(custom, 1)
            _wait_ready(custom, 1, 300)
            operator.wait_idle(10, 600)
            base_changes = _changes(custom, one, args.changes, "one")
            operator.wait_idle(10, 600)
            base_rss, base_procs = operator.rss_mib()
            print(f"baseline, 1 DevServer: operator RSS {base_rss:.0f} MiB ({base_procs} processes); one change "
                  f"reconciled in {_spread(base_changes, ' s')}", flush=True)

            # 2. the servers
            n = args.servers
            t0 = time.monotonic()
            _create(custom, n - 1, first=1)
            created = time.monotonic() - t0
            took = _wait_ready(custom, n, 6 * 3600)
            idle = operator.wait_idle(60, 3 * 3600)
            print(f"{n} DevServers: created in {created:.0f} s, all Ready after {took:.0f} s, then the operator "
                  f"idle {idle:.0f} s later", flush=True)

            # 3. at rest
            before, requests_before = operator.metrics(), _kubesim_metrics(sim.url)
            rss_rest = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.rest:
                time.sleep(min(30.0, args.rest - (time.monotonic() - t0)))
                rss_rest.append(operator.rss_mib()[0])
            rest = time.monotonic() - t0
            after, requests_after = operator.metrics(), _kubesim_metrics(sim.url)
            reconciles = Counter({f"{c} {cause}": v for (c, cause), v in
                                  (after["reconciles"] - before["reconciles"]).items() if v})
            requests = requests_after - requests_before
            writes = Counter({k: v for k, v in requests.items()
                              if k.split()[0] in ("create", "update", "patch", "delete", "deletecollection")})
            print(f"at rest, {rest:.0f} s with {n} DevServers:", flush=True)
            print(f"  reconciles: {_per_minute(reconciles, rest)}", flush=True)
            print(f"  API requests: {sum(requests.values()) * 60 / rest:.1f}/min: {_per_minute(requests, rest)}", flush=True)
            print(f"  write requests: {sum(writes.values())} ({_per_minute(writes, rest)})", flush=True)

            # 4. memory
            rss, procs = operator.rss_mib()
            sim_rss = _rss_kib(sim.pid) / 1024
            print(f"memory: operator RSS {rss:.0f} MiB ({procs} processes; during the rest "
                  f"{min(rss_rest):.0f}-{max(rss_rest):.0f} MiB) = {rss / base_rss:.2f}x the 1-DevServer baseline, "
                  f"{(rss - base_rss) * 1024 / (n - 1):.0f} KiB per DevServer; kubesim RSS {sim_rss:.0f} MiB", flush=True)

            # 5. devctl list
            half = sum(1 for i in range(n) if NAMESPACES[i % len(NAMESPACES)] == NAMESPACES[0])
            times = bench_list(sim.kubeconfig, NAMESPACES[0], half, args.lists)
            lst, kubectl, version = (statistics.median(times[k]) for k in
                                     ("devctl list", "kubectl get devservers", "devctl version"))
            print(f"devctl list, {half} DevServers: {_spread(times['devctl list'], ' s')} (goal <= 0.6 s); "
                  f"kubectl get devservers {_spread(times['kubectl get devservers'], ' s')}: ratio {lst / kubectl:.2f}; "
                  f"devctl version {_spread(times['devctl version'], ' s')}: ratio {lst / version:.2f}", flush=True)

            # 6. one change with all the servers present
            changes = _changes(custom, one, args.changes, "all")
            print(f"one change reconciled with {n} DevServers: {_spread(changes, ' s')}; with 1: "
                  f"{_spread(base_changes, ' s')}; ratio {statistics.median(changes) / statistics.median(base_changes):.2f}",
                  flush=True)
        finally:
            operator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
