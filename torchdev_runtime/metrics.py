"""The local runtime's reconcile metrics, under the names ansible-operator serves (its
controller-runtime metrics), so that the rules and dashboards of config/prometheus work with
either: per controller (``<kind>-controller``, lower case, as ansible-operator names them)

- ``controller_runtime_reconcile_total{controller, result}``: result ``success`` or ``error``
- ``controller_runtime_reconcile_errors_total{controller}``
- ``controller_runtime_reconcile_time_seconds{controller}``: a histogram
- ``controller_runtime_active_workers{controller}``: reconciles running now
- ``workqueue_depth{controller, name}``: keys waiting for a worker (delayed requeues not
  counted until due), client-go's workqueue metric as controller-runtime registers it

and, the runtime's own, ``torchdev_runtime_reconciles_total{controller, cause}`` (change,
dependent, deadline, resync, retry, manual: why each ran).  ``torchdev-runtime
--metrics-bind-address`` serves them.
"""
from __future__ import annotations

from typing import Any, Iterable

from .controller import RECONCILE_TIME_BUCKETS


class RuntimeCollector:
    """A prometheus_client collector reading a Runtime's controllers at scrape time."""

    def __init__(self, runtime: Any):
        self.runtime = runtime

    def collect(self) -> Iterable:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        total = CounterMetricFamily("controller_runtime_reconcile", "Total number of reconciliations per controller.",
                                    labels=["controller", "result"])
        errors = CounterMetricFamily("controller_runtime_reconcile_errors",
                                     "Total number of reconciliation errors per controller.", labels=["controller"])
        times = HistogramMetricFamily("controller_runtime_reconcile_time_seconds",
                                      "Length of time per reconciliation per controller.", labels=["controller"])
        active = GaugeMetricFamily("controller_runtime_active_workers",
                                   "Number of currently used workers per controller.", labels=["controller"])
        causes = CounterMetricFamily("torchdev_runtime_reconciles", "Reconciles per controller by cause.",
                                     labels=["controller", "cause"])
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue.", labels=["controller", "name"])
        for gvk, c in sorted(self.runtime.controllers.items(), key=lambda item: item[0].kind):
            name = "%s-controller" % gvk.kind.lower()
            with c._stats_lock:
                stats, by_cause = dict(c.stats), dict(c.causes)
                buckets, seconds = list(c.duration_buckets), c.duration_sum
            total.add_metric([name, "success"], stats["succeeded"])
            total.add_metric([name, "error"], stats["failed"])
            errors.add_metric([name], stats["failed"])
            times.add_metric([name], [("+Inf" if b == float("inf") else repr(b), n)
                                      for b, n in zip(RECONCILE_TIME_BUCKETS, buckets)], seconds)
            active.add_metric([name], stats["in_flight"])
            depth.add_metric([name, name], len(c.queue))
            for cause, n in sorted(by_cause.items()):
                causes.add_metric([name, cause], n)
        yield from (total, errors, times, active, causes, depth)


def serve(runtime: Any, address: str) -> Any:
    """Serve the metrics on ``host:port`` (``:8080`` = every address); the server."""
    from prometheus_client import CollectorRegistry, start_http_server

    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(runtime))
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    return server
