"""torchdev-exporter: serve torchdev's Prometheus series (docs/metrics.md).

    torchdev-exporter [--kubeconfig PATH] [--port 8686] [--address 0.0.0.0]

Reads the cluster through watches: DevServers, TrainingJobs and EphemeralAccelerationJobs in
every namespace, the DevServerFlavors and the DevUsers (whose e-mails are the only values of
the ``user`` label), each listed once, then watched from the list's resourceVersion; a watch
that ends (the server's timeout) is resumed from the last resourceVersion it delivered, and
only 410 Gone or an error relists, replacing what the exporter holds (an object deleted
while the watch was down disappears).  No polling loop: a scrape computes the series from
what the watches delivered.  Runs as the second
container of the operator Deployment (config/manager) and beside the local runtime in
`make run` / `make demo`.
"""
from __future__ import annotations

import argparse
import logging
import threading
import time

from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP, VERSION
from torchdev_exporter.metrics import Store, collect

log = logging.getLogger("torchdev_exporter")
WATCH_TIMEOUT = 300  # seconds a watch request lasts before it is resumed (not relisted)


class Collector:
    def __init__(self, store: Store):
        self.store = store

    def collect(self):
        return collect(self.store)


def watch_forever(list_fn, replace, apply, delete, stop: threading.Event, what: str,
                  timeout_seconds: int = WATCH_TIMEOUT) -> None:
    """List (``replace`` with the items), then watch from the list's resourceVersion.  A watch
    request that ends is resumed from the last resourceVersion it delivered (events and
    bookmarks); 410 Gone (that version was compacted away) relists at once, any other error
    after a backoff."""
    from kubernetes import watch
    from kubernetes.client.exceptions import ApiException

    backoff, rv = 1.0, None
    while not stop.is_set():
        try:
            if rv is None:
                listed = list_fn()
                replace(listed.get("items") or [])
                rv = (listed.get("metadata") or {}).get("resourceVersion") or "0"
            w = watch.Watch()
            for event in w.stream(list_fn, resource_version=rv, timeout_seconds=timeout_seconds,
                                  allow_watch_bookmarks=True):
                if stop.is_set():
                    w.stop()
                    return
                kind, obj = event["type"], event["object"]
                if kind in ("ADDED", "MODIFIED"):
                    apply(obj)
                elif kind == "DELETED":
                    delete(obj)
                rv = w.resource_version or rv  # BOOKMARK events move it too
            backoff = 1.0
        except Exception as exc:  # noqa: BLE001 - the watch must outlive API errors
            rv = None
            if isinstance(exc, ApiException) and exc.status == 410:
                log.info("%s watch: its resourceVersion is gone (410); relisting", what)
                continue
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

        def lister(plural):
            def list_fn(**kw):
                return custom.list_cluster_custom_object(API_GROUP, VERSION, plural, **kw)
            return list_fn

        store = self.store
        for what, replace, apply, delete in (
                ("devusers", store.replace_devusers, store.apply_devuser, store.delete_devuser),
                ("devserverflavors", store.replace_flavors, store.apply_flavor, store.delete_flavor),
                ("devservers", store.replace, store.apply, store.delete),
                ("trainingjobs", store.replace_trainingjobs, store.apply_trainingjob, store.delete_trainingjob),
                ("ephemeralaccelerationjobs", store.replace_eajs, store.apply_eaj, store.delete_eaj)):
            t = threading.Thread(target=watch_forever, args=(lister(what), replace, apply, delete, self.stop, what),
                                 name=f"watch-{what}", daemon=True)
            t.start()
            self.threads.append(t)
        registry = CollectorRegistry()
        registry.register(Collector(self.store))
        self.server, _thread = start_http_server(port, addr=address, registry=registry)
        self.port = self.server.server_address[1]
        return self

    def synced(self) -> bool:
        """Whether every kind has been listed once (the counters' baseline is taken)."""
        with self.store.lock:
            return {"devusers", "flavors", "devservers", "trainingjobs", "ephemeralaccelerationjobs"} <= self.store.listed

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
