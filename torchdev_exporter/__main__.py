"""torchdev-exporter: serve torchdev's Prometheus series (docs/metrics.md).

    torchdev-exporter [--kubeconfig PATH] [--port 8686] [--address 0.0.0.0]

Reads the cluster through watches (list, then watch from its resourceVersion; a broken or
expired watch relists): DevServers in every namespace and the DevServerFlavors.  No polling
loop: a scrape computes the series from what the watches delivered.  Runs as the second
container of the operator Deployment (config/manager) and beside the local runtime in
`make run` / `make demo`.
"""
from __future__ import annotations

import argparse
import logging
import threading
import time

from torchdev_exporter.metrics import Store, collect

log = logging.getLogger("torchdev_exporter")
GROUP, VERSION = "torchdev.io", "v1alpha1"


class Collector:
    def __init__(self, store: Store):
        self.store = store

    def collect(self):
        return collect(self.store)


def watch_forever(list_fn, apply, delete, stop: threading.Event, what: str) -> None:
    """List, then watch from the list's resourceVersion; relist after an error or 410 Gone."""
    from kubernetes import watch

    backoff = 1.0
    while not stop.is_set():
        try:
            listed = list_fn()
            items = listed.get("items") or []
            for obj in items:
                apply(obj)
            rv = (listed.get("metadata") or {}).get("resourceVersion")
            backoff = 1.0
            w = watch.Watch()
            for event in w.stream(list_fn, resource_version=rv, timeout_seconds=300, allow_watch_bookmarks=True):
                if stop.is_set():
                    w.stop()
                    return
                kind, obj = event["type"], event["object"]
                if kind in ("ADDED", "MODIFIED"):
                    apply(obj)
                elif kind == "DELETED":
                    delete(obj)
        except Exception as exc:  # noqa: BLE001 - the watch must outlive API errors
            log.warning("%s watch: %s; relisting in %.0fs", what, exc, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, 60.0)


class Exporter:
    def __init__(self, kubeconfig: str | None = None):
        self.kubeconfig = kubeconfig
        self.store = Store()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.server = None

    def start(self, port: int = 8686, address: str = "0.0.0.0") -> "Exporter":
        from kubernetes import client, config
        from prometheus_client import CollectorRegistry, start_http_server

        if self.kubeconfig:
            api = config.new_client_from_config(self.kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api = client.ApiClient()
        custom = client.CustomObjectsApi(api)

        def devservers(**kw):
            return custom.list_cluster_custom_object(GROUP, VERSION, "devservers", **kw)

        def flavors(**kw):
            return custom.list_cluster_custom_object(GROUP, VERSION, "devserverflavors", **kw)

        def trainingjobs(**kw):
            return custom.list_cluster_custom_object(GROUP, VERSION, "trainingjobs", **kw)

        for fn, apply, delete, what in ((flavors, self.store.apply_flavor, self.store.delete_flavor, "flavors"),
                                        (devservers, self.store.apply, self.store.delete, "devservers"),
                                        (trainingjobs, self.store.apply_trainingjob, self.store.delete_trainingjob,
                                         "trainingjobs")):
            t = threading.Thread(target=watch_forever, args=(fn, apply, delete, self.stop, what),
                                 name=f"watch-{what}", daemon=True)
            t.start()
            self.threads.append(t)
        registry = CollectorRegistry()
        registry.register(Collector(self.store))
        self.server, _thread = start_http_server(port, addr=address, registry=registry)
        self.port = self.server.server_address[1]
        return self

    def close(self) -> None:
        self.stop.set()
        if self.server is not None:
            self.server.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchdev-exporter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    parser.add_argument("--port", type=int, default=8686)
    parser.add_argument("--address", default="0.0.0.0")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    exporter = Exporter(args.kubeconfig).start(args.port, args.address)
    log.info("serving torchdev metrics on %s:%d/metrics", args.address, exporter.port)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        exporter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
