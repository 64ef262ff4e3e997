"""kubesim micro-benchmark (not a test): `python -m bench.kubesim_bench [--pods N] [--rounds N]`.

Stores 10,000 objects (9,000 pods in 30 namespaces + 1,000 ConfigMaps/Secrets/Services),
created in-process with every controller disabled, then measures over HTTP with one
keep-alive connection:

* the floor of the HTTP stack: GET /version
* a single GET of a pod
* a label-selected list of 1,000 pods (across all namespaces)
* watch fan-out: 20 watchers on pods; for each of N updates, the delay from the write to
  the moment the last watcher has the event
* CRD admission: an update of the sample DevServer through its CRD's schema and CEL rules
  (pruning, defaults, validation, transition rules), in-process

Prints `name: value unit` lines, and ratios to the GET /version floor measured in the same
run. Client and simulator share one process (the simulator runs on its own thread, as in
the tests), so the figures include GIL contention with the client.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import sys
import threading
import time
from urllib.parse import quote

from kubesim.testing import KubeSim

TARGETS_MS = {"get_pod_p50": 2.0, "list_1000_p50": 50.0}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def all_controllers() -> list[str]:
    from kubesim.controllers import REGISTRY, load_builtins

    load_builtins()
    return sorted(REGISTRY)


def populate(sim: KubeSim, pods: int, others: int, namespaces: int) -> dict:
    """Create the objects in-process, in batches on the simulator's loop."""
    api = sim.api
    nss = [f"bench-{i:02d}" for i in range(namespaces)]

    def batch(start: int, stop: int) -> None:
        for i in range(start, stop):
            ns = nss[i % namespaces]
            api.create("pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"pod-{i:05d}", "namespace": ns,
                             "labels": {"app": f"app-{i % 50}", "shard": f"s{i // 1000}",
                                        "tier": "web" if i % 2 else "db"}},
                "spec": {"nodeName": f"node-{i % 20}",
                         "containers": [{"name": "main", "image": "registry.local/app:1.0",
                                         "resources": {"requests": {"cpu": "100m",
                                                                    "memory": "128Mi"}},
                                         "env": [{"name": "INDEX", "value": str(i)}]}]}},
                ns)

    def create_namespaces() -> None:
        for ns in nss:
            api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns}})

    def create_others() -> None:
        for i in range(others):
            ns = nss[i % namespaces]
            kind = i % 3
            if kind == 0:
                api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": f"cm-{i}"},
                                          "data": {"k": "v" * 64}}, ns)
            elif kind == 1:
                api.create("secrets", {"apiVersion": "v1", "kind": "Secret",
                                       "metadata": {"name": f"secret-{i}"},
                                       "data": {"token": "dG9rZW4="}}, ns)
            else:
                api.create("services", {"apiVersion": "v1", "kind": "Service",
                                        "metadata": {"name": f"svc-{i}"},
                                        "spec": {"selector": {"app": f"app-{i % 50}"},
                                                 "ports": [{"port": 80}]}}, ns)

    t0 = time.perf_counter()
    sim.call(create_namespaces)
    for start in range(0, pods, 500):
        sim.call(batch, start, min(start + 500, pods))
    sim.call(create_others)
    return {"seconds": time.perf_counter() - t0, "namespaces": nss,
            "stored": sim.call(api.store.count)}


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, url: str):
        host, port = url.split("//")[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port))

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path, headers={"Accept": "application/json"})
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
        return body

    def timed(self, path: str, rounds: int) -> list[float]:
        for _ in range(min(20, rounds)):  # warm-up
            self.get(path)
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            self.get(path)
            out.append((time.perf_counter() - t0) * 1000.0)
        return out


def watch_fanout(sim: KubeSim, namespace: str, watchers: int, updates: int) -> list[float]:
    """Delay (ms) from each write to the last of `watchers` receiving its event."""
    host, port = sim.url.split("//")[1].split(":")
    received: dict[str, list[float]] = {}
    done = threading.Condition()
    connected = [0]
    loop = asyncio.new_event_loop()

    async def one_watcher() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        path = f"/api/v1/namespaces/{namespace}/pods?watch=true&resourceVersion=" + \
            sim.call(lambda: str(sim.api.store.rv)) + "&fieldSelector=" + \
            quote("metadata.name=pod-00000")
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\r\n"
                     .encode())
        await writer.drain()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # response headers: the watch is registered
        with done:
            connected[0] += 1
            done.notify_all()
        while True:
            size_line = await reader.readline()  # chunked encoding
            if not size_line:
                return
            size = int(size_line.strip() or b"0", 16)
            if size == 0:
                return
            chunk = await reader.readexactly(size + 2)
            now = time.perf_counter()
            for line in chunk[:-2].splitlines():
                rv = json.loads(line)["object"]["metadata"]["resourceVersion"]
                with done:
                    received.setdefault(rv, []).append(now)
                    done.notify_all()

    async def main() -> None:
        await asyncio.gather(*(one_watcher() for _ in range(watchers)), return_exceptions=True)

    def run_loop() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        except BaseException:  # noqa: BLE001 - cancelled at the end of the measurement
            pass
        finally:
            loop.close()

    t = threading.Thread(target=run_loop, daemon=True)
    t.start()
    with done:
        if not done.wait_for(lambda: connected[0] == watchers, timeout=30):
            raise RuntimeError(f"only {connected[0]} of {watchers} watchers connected")

    delays = []
    ns = namespace
    for i in range(updates):
        def write(i=i) -> str:
            obj = sim.api.patch("pods", ns, "pod-00000",
                                {"metadata": {"annotations": {"bench/round": str(i)}}})
            return obj["metadata"]["resourceVersion"]
        t0 = time.perf_counter()
        rv = sim.call(write)
        with done:
            ok = done.wait_for(lambda: len(received.get(rv, ())) >= watchers, timeout=10)
        if not ok:
            raise RuntimeError(f"only {len(received.get(rv, ()))} watchers got rv {rv}")
        delays.append((max(received[rv]) - t0) * 1000.0)
    loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(loop)])
    return delays


def crd_admit(rounds: int) -> list[float]:
    """Milliseconds per admission of an update of the sample DevServer by its CRD (schema,
    defaults, CEL rules with oldSelf)."""
    import pathlib

    import yaml

    from kubesim import validation

    root = pathlib.Path(__file__).resolve().parent.parent
    crd = yaml.safe_load((root / "config/crd/bases/torchdev.io_devservers.yaml").read_text())
    obj = yaml.safe_load((root / "config/samples/torchdev_v1alpha1_devserver_standalone.yaml").read_text())
    obj["metadata"]["namespace"] = "default"
    schema = validation.CRDModel(crd).version(obj["apiVersion"].split("/")[1])
    old = schema.admit(obj)
    times = []
    for _ in range(max(rounds, 1)):
        t = time.perf_counter()
        schema.admit(obj, old)
        times.append((time.perf_counter() - t) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=9000)
    p.add_argument("--others", type=int, default=1000)
    p.add_argument("--namespaces", type=int, default=30)
    p.add_argument("--rounds", type=int, default=500, help="requests per latency figure")
    p.add_argument("--list-rounds", type=int, default=50)
    p.add_argument("--watchers", type=int, default=20)
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--profile", choices=["get", "list", "watch"],
                   help="run cProfile over one phase and print the top functions")
    args = p.parse_args(argv)

    sim = KubeSim(nodes="", disabled=all_controllers()).start()
    try:
        info = populate(sim, args.pods, args.others, args.namespaces)
        print(f"objects_stored: {info['stored']} objects")
        print(f"populate_time: {info['seconds']:.2f} s")
        c = Client(sim.url)
        ns0 = info["namespaces"][0]
        shard_size = min(1000, args.pods)
        list_path = "/api/v1/pods?labelSelector=" + quote("shard=s3" if args.pods >= 4000
                                                            else "shard=s0")
        n_listed = len(json.loads(c.get(list_path))["items"])

        profiler = None
        if args.profile:
            import cProfile
            profiler = cProfile.Profile()

        # the profiler runs on the simulator's thread (the server side of each request)
        def phase(name):
            if profiler and args.profile == name:
                sim.call(profiler.enable)

        def end(name):
            if profiler and args.profile == name:
                sim.call(profiler.disable)

        version = c.timed("/version", args.rounds)
        phase("get")
        get = c.timed(f"/api/v1/namespaces/{ns0}/pods/pod-00000", args.rounds)
        end("get")
        phase("list")
        lst = c.timed(list_path, args.list_rounds)
        end("list")
        phase("watch")
        fan = watch_fanout(sim, ns0, args.watchers, args.updates)
        end("watch")
        admit = crd_admit(args.rounds // 10)

        floor = statistics.median(version)
        figures = [
            ("version_p50", statistics.median(version), "ms"),
            ("version_p90", pct(version, 90), "ms"),
            ("get_pod_p50", statistics.median(get), "ms"),
            ("get_pod_p90", pct(get, 90), "ms"),
            (f"list_{n_listed}_p50", statistics.median(lst), "ms"),
            (f"list_{n_listed}_p90", pct(lst, 90), "ms"),
            (f"watch_fanout_{args.watchers}_p50", statistics.median(fan), "ms"),
            (f"watch_fanout_{args.watchers}_p99", pct(fan, 99), "ms"),
            ("crd_admit_devserver_p50", statistics.median(admit), "ms"),
        ]
        for name, value, unit in figures:
            print(f"{name}: {value:.3f} {unit}")
        for name, value, _ in figures[2:]:
            print(f"{name}_vs_version_p50: {value / floor:.1f} x")
        failed = []
        for key, target in TARGETS_MS.items():
            value = {"get_pod_p50": statistics.median(get),
                     "list_1000_p50": statistics.median(lst)}[key]
            status = "ok" if value < target else "MISSED"
            print(f"target_{key}: {target:.0f} ms ({status})")
            if value >= target and (key != "list_1000_p50" or n_listed == shard_size == 1000):
                failed.append(key)
        if profiler:
            import pstats
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(25)
        return 1 if failed else 0
    finally:
        sim.stop()


if __name__ == "__main__":
    sys.exit(main())
