"""torchdev-exporter: serve torchdev's Prometheus series (docs/metrics.md).

    torchdev-exporter [--kubeconfig PATH] [--port 8686] [--address 0.0.0.0] [--tls-cert-dir DIR]
    torchdev-exporter --insecure-loopback --address 127.0.0.1 [--port 8686]     (local use)

Serves HTTPS, to clients whose bearer token the cluster authenticates (TokenReview) and
authorizes for `get` on /metrics (SubjectAccessReview; the ClusterRole metrics-reader), as
kube-rbac-proxy does (serve.py); /healthz answers anyone.  --insecure-loopback: plain HTTP
without authentication, on a loopback address only.

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
import os
import threading
import time

from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP, VERSION
from torchdev_exporter import serve
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

    def start(self, port: int = 8686, address: str = "0.0.0.0", insecure_loopback: bool = False,
              cert_dir: str | None = None, review=None, cache_ttl: float = 60.0) -> "Exporter":
        """Watch the cluster and serve /metrics on ``address:port``: HTTPS to authorized
        clients (serve.py; ``review``: token -> (decision, user), by default the cluster's
        TokenReview and SubjectAccessReview), or with ``insecure_loopback`` plain HTTP to anyone,
        which only a loopback ``address`` may do."""
        from kubernetes import client, config
        from prometheus_client import CollectorRegistry, make_wsgi_app

        if insecure_loopback and not serve.is_loopback(address):
            raise ValueError("--insecure-loopback serves without TLS or authentication: only on a loopback "
                             "address (127.0.0.1, ::1), not %s" % address)
        if self.kubeconfig:
            api = config.new_client_from_config(self.kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api = client.ApiClient()
        custom = client.CustomObjectsApi(api)
        ctx = reviewer = None
        if not insecure_loopback:
            ctx, self.cert_file = serve.tls_context(cert_dir, [address if address not in ("0.0.0.0", "::", "")
                                                               else "torchdev-exporter", "localhost", "127.0.0.1"])
            reviewer = serve.Reviewer(review or serve.kubernetes_review(api), ttl=cache_ttl)
        self.reviewer = reviewer

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
        self.server = serve.serve(serve.guard(make_wsgi_app(registry), reviewer), address, port, ctx)
        self.port = self.server.server_address[1]
        self.scheme = "http" if ctx is None else "https"
        return self

    def synced(self) -> bool:
        """Whether every kind has been listed once (the counters' baseline is taken)."""
        with self.store.lock:
            return {"devusers", "flavors", "devservers", "trainingjobs", "ephemeralaccelerationjobs"} <= self.store.listed

    def close(self) -> None:
        self.stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchdev-exporter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    parser.add_argument("--port", type=int, default=8686)
    parser.add_argument("--address", default="0.0.0.0")
    parser.add_argument("--tls-cert-dir", default=os.environ.get("TORCHDEV_EXPORTER_TLS_CERT_DIR") or None,
                        help="a directory with tls.crt and tls.key (a mounted Secret); default: a self-signed "
                             "certificate made at start")
    parser.add_argument("--auth-cache-seconds", type=float, default=60.0,
                        help="how long a token's review result is reused (default 60)")
    parser.add_argument("--insecure-loopback", action="store_true",
                        default=os.environ.get("TORCHDEV_EXPORTER_INSECURE_LOOPBACK") == "1",
                        help="plain HTTP without authentication, for local use (make run, make demo); "
                             "refused unless --address is a loopback address")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        exporter = Exporter(args.kubeconfig).start(args.port, args.address, insecure_loopback=args.insecure_loopback,
                                                   cert_dir=args.tls_cert_dir, cache_ttl=args.auth_cache_seconds)
    except ValueError as exc:
        parser.error(str(exc))
    log.info("serving torchdev metrics on %s://%s:%d/metrics%s", exporter.scheme, args.address, exporter.port,
             "" if args.insecure_loopback else " (bearer token: TokenReview + SubjectAccessReview, get /metrics)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        exporter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
