"""Benchmark: the metrics exporter's cost (issue 13 item 7).

    python -m bench.exporter [--servers 1000] [--scrapes 20]

kubesim in its own process holds N DevServers (statuses spread over the phases, reservations,
idle servers); the exporter runs as in production, its own process (`python -m
torchdev_exporter`) watching them (list, then watch). Printed: the time of one scrape (median
and max of --scrapes HTTP GETs of /metrics, target < 100 ms) and the exporter process's memory
(RSS and peak, target < 100 MB), beside the baseline of the same interpreter importing the same
libraries and watching nothing.
"""
from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from datetime import datetime, timezone

PHASES = ("Running", "Running", "Running", "Queued", "Stopped", "Expired", "Provisioning")


def _rss_mb(pid: int | str = "self", field: str = "VmRSS:") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for {pid}")


def _servers_seen(url: str) -> float:
    """The DevServers the exporter counts (sum of torchdev_devservers), 0 before it serves."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
    except OSError:
        return 0
    return sum(s.value for fam in text_string_to_metric_families(text) if fam.name == "torchdev_devservers"
               for s in fam.samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args(argv)

    import yaml
    from kubernetes import client, config

    from bench.reconcile import GROUP, KEY, NODES, ROOT, VERSION, _kubesim_process

    with _kubesim_process(NODES) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        ext, custom, core = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)
        for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
            ext.create_custom_resource_definition(yaml.safe_load(crd.read_text()))
        for f in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
            custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", yaml.safe_load(f.read_text()))
        flavors = ["cpu-small", "gpu-a10g-1", "gpu-h100-2", "gpu-h100-8"]
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        t0 = time.monotonic()
        for u in range(args.servers // 10 + 1):
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"dev-u{u}"}})
        for i in range(args.servers):
            ns, name = f"dev-u{i // 10}", f"s{i}"
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer", "metadata": {"name": name},
                "spec": {"owner": f"u{i // 10}@example.com", "flavor": flavors[i % 4], "sshPublicKeys": [KEY]}})
            phase = PHASES[i % len(PHASES)]
            status = {"phase": phase, "replicas": 1 if phase == "Running" else 0,
                      "reservation": {"startedAt": now, "expiresAt": now}}
            if phase == "Running" and i % 3 == 0:
                status["idle"] = {"since": now, "deadline": now, "autoShutdown": True}
            custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "devservers", name, {"status": status})
        print(f"setup: {args.servers} DevServers in kubesim in {time.monotonic() - t0:.0f} s")

        # the exporter as it runs in production: its own process (the console script)
        import socket
        import subprocess
        import sys

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "torchdev_exporter", "--kubeconfig", sim.kubeconfig,
                                 "--port", str(port), "--address", "127.0.0.1", "--insecure-loopback"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            deadline = time.monotonic() + 300
            while _servers_seen(url) < args.servers:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the exporter did not see every DevServer")
                time.sleep(0.2)
            times, size = [], 0
            for _ in range(args.scrapes):
                t = time.perf_counter()
                with urllib.request.urlopen(url, timeout=30) as response:
                    size = len(response.read())
                times.append(time.perf_counter() - t)
            rss, peak = _rss_mb(proc.pid), _rss_mb(proc.pid, "VmHWM:")
        finally:
            proc.terminate()
            proc.wait(30)
        # the same interpreter with the same libraries and nothing watched: what any exporter costs
        base = subprocess.Popen([sys.executable, "-c", "import sys, kubernetes, prometheus_client, "
                                 "torchdev_exporter.__main__; print('imported', flush=True); sys.stdin.read()"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        base.stdout.readline()
        baseline = _rss_mb(base.pid)
        base.communicate(b"")
    print(f"scrape of {args.servers} DevServers: median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms over {args.scrapes} scrapes ({size} bytes; target < 100 ms)")
    print(f"exporter process memory: RSS {rss:.0f} MB, peak {peak:.0f} MB (target < 100 MB); the same "
          f"interpreter and libraries watching nothing: {baseline:.0f} MB, so {rss - baseline:.0f} MB for "
          f"{args.servers} DevServers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
