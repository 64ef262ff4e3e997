"""The local runtime's reconcile metrics (issue 13.1: reconciles, their duration and errors per
kind), under ansible-operator's names, scraped over HTTP while it reconciles on kubesim."""
from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from _e2e_helpers import GROUP, VERSION, devserver, wait_ready
from torchdev_runtime.metrics import serve


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_reconciles_duration_and_errors_per_kind(sim, kube, runtime, ns):
    server = serve(runtime, "127.0.0.1:0")
    port = server.server_address[1]
    try:
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("counted"))
        wait_ready(sim, kube, ns, "counted")
        assert runtime.wait_idle(180)
        got = scrape(port)
        c = runtime.counters("DevServer")
        ds = (("controller", "devserver-controller"),)
        assert got[("controller_runtime_reconcile_total", ds + (("result", "success"),))] == c["succeeded"] >= 2
        assert got[("controller_runtime_reconcile_total", ds + (("result", "error"),))] == c["failed"]
        assert got[("controller_runtime_reconcile_errors_total", ds)] == c["failed"]
        count = got[("controller_runtime_reconcile_time_seconds_count", ds)]
        assert count == c["succeeded"] + c["failed"]
        assert got[("controller_runtime_reconcile_time_seconds_bucket", tuple(sorted(ds + (("le", "+Inf"),))))] == count
        assert got[("controller_runtime_reconcile_time_seconds_sum", ds)] > 0
        assert sum(v for (n, labels), v in got.items() if n == "torchdev_runtime_reconciles_total"
                   and dict(labels)["controller"] == "devserver-controller") >= count  # each has a cause
        # every kind of watches.yaml has its controller
        kinds = {dict(labels)["controller"] for (n, labels) in got if n == "controller_runtime_reconcile_total"}
        assert {"devserver-controller", "devserverflavor-controller", "devuser-controller",
                "trainingjob-controller"} <= kinds
    finally:
        server.shutdown()
