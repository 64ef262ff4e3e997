"""Benchmark: how close to its ETA a queued DevServer starts (issue 12.6, target <= 60 s).

    python -m bench.queue_eta [--rounds 3] [--short 60]

kubesim with Kueue and the local runtime: a ClusterQueue with 4 GPUs of the gpu-h100-2 flavor,
two 2-GPU servers holding it with reservations of hours, a third queued behind them.  Each
round shortens the first holder's reservation to end ``--short`` seconds later; the queued
server's ETA (status.queue.estimatedStartTime) becomes that expiry, and the benchmark prints
how long after it the server's reservation started (its first Ready), then frees the quota
for the next round.  tests/e2e/test_kueue_e2e.py checks the order (never before the ETA);
this prints the distance.
"""
from __future__ import annotations

import argparse
import pathlib
import time
from datetime import datetime, timedelta, timezone

import yaml

from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP as GROUP, API_VERSION, VERSION
from kubesim import kueue as kq
from kubesim.testing import KubeSim

ROOT = pathlib.Path(__file__).resolve().parent.parent
NODES = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
FLAVOR = "gpu-h100-2"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchmarkKeyForTorchdevReconcilexxxxxxxxxxxxx bench"
NS = "bench-eta"
KUEUE = ("kueue.x-k8s.io", "v1beta2")


def _ts(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _stamp(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _wait(what: str, fn, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--short", type=int, default=60, help="seconds until the shortened reservation ends")
    args = parser.parse_args(argv)

    from kubernetes import client, config
    from torchdev_runtime.runtime import Runtime

    with KubeSim(nodes=NODES, kueue=True) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        ext, custom, core = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)
        for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
            ext.create_custom_resource_definition(yaml.safe_load(crd.read_text()))
        for wpc in yaml.safe_load_all((ROOT / "config" / "kueue" / "workloadpriorityclasses.yaml").read_text()):
            if wpc:
                custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", wpc)
        custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", yaml.safe_load(
            (ROOT / "config" / "samples" / f"torchdev_v1alpha1_devserverflavor_{FLAVOR}.yaml").read_text()))
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        quota = {"cpu": 192, "memory": "2000Gi", "ephemeral-storage": "4Ti", "nvidia.com/gpu": 4}
        custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
            "apiVersion": kq.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": "cq-bench"},
            "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [{
                "coveredResources": list(quota), "flavors": [{"name": FLAVOR, "resources": [
                    {"name": k, "nominalQuota": v} for k, v in quota.items()]}]}]}})
        custom.create_namespaced_custom_object(*KUEUE, NS, "localqueues", {
            "apiVersion": kq.API_VERSION, "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": NS},
            "spec": {"clusterQueue": "cq-bench"}})

        def get(name):
            return custom.get_namespaced_custom_object(GROUP, VERSION, NS, "devservers", name)

        def create(name, hours=None):
            spec = {"owner": "bench@example.com", "flavor": FLAVOR, "sshPublicKeys": [KEY]}
            if hours:
                spec["lifecycle"] = {"duration": f"{hours}h"}
            custom.create_namespaced_custom_object(GROUP, VERSION, NS, "devservers", {
                "apiVersion": API_VERSION, "kind": "DevServer", "metadata": {"name": name}, "spec": spec})

        def ready(name):
            o = get(name)
            return o if (o.get("status") or {}).get("phase") == "Running" else None

        lags = []
        with Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig, ansible_config=str(ROOT / "ansible.cfg")):
            _wait("the ResourceFlavor", lambda: custom.list_cluster_custom_object(*KUEUE, "resourceflavors")["items"])
            create("hold-a", 8)
            _wait("hold-a Running", lambda: ready("hold-a"))
            create("hold-b", 8)
            _wait("hold-b Running", lambda: ready("hold-b"))
            holders = ["hold-a", "hold-b"]
            for i in range(args.rounds):
                waiting = f"wait-{i}"
                create(waiting, 8)
                _wait(f"{waiting} queued with an ETA", lambda: ((get(waiting).get("status") or {}).get("queue")
                                                                 or {}).get("estimatedStartTime"))
                first = get(holders[0])
                begun = _ts(first["status"]["reservation"]["startedAt"])
                now = datetime.now(timezone.utc).replace(microsecond=0)
                duration = int((now - begun).total_seconds()) + args.short
                custom.patch_namespaced_custom_object(GROUP, VERSION, NS, "devservers", holders[0],
                                                      {"spec": {"lifecycle": {"duration": f"{duration}s"}}})
                expires = _stamp(begun + timedelta(seconds=duration))
                eta = _wait(f"{waiting}'s ETA {expires}", lambda: ((get(waiting).get("status") or {}).get("queue")
                                                                   or {}).get("estimatedStartTime") == expires
                            and expires, args.short + 120)
                obj = _wait(f"{waiting} Running", lambda: ready(waiting), args.short + 600)
                lag = int((_ts(obj["status"]["reservation"]["startedAt"]) - _ts(eta)).total_seconds())
                lags.append(lag)
                print(f"round {i + 1}: ETA {eta}, started {obj['status']['reservation']['startedAt']}: {lag:+d} s",
                      flush=True)
                custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "devservers", holders[0])
                _wait(f"{holders[0]} gone", lambda: not any(
                    o["metadata"]["name"] == holders[0] for o in
                    custom.list_namespaced_custom_object(GROUP, VERSION, NS, "devservers")["items"]))
                holders = [holders[1], waiting]
    lags.sort()
    print(f"queued server started after its ETA: median {lags[len(lags) // 2]:+d} s, max {lags[-1]:+d} s "
          f"over {len(lags)} rounds (target: within 60 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
