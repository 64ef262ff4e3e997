"""The exporter's Store, without a cluster: what a stream of DevServer changes turns into
(issue 13.1/13.2), read back through prometheus_client's own text format and parser."""
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from torchdev_exporter.__main__ import Collector
from torchdev_exporter.metrics import Store

FLAVOR = {"metadata": {"name": "gpu-2"}, "spec": {"pricePerHour": 10.0, "gpu": {"count": 2, "type": "h100"},
                                                  "resources": {"limits": {"nvidia.com/gpu": 2}}}}


def server(name, phase="Running", startup=None, owner="jane@example.com"):
    status = {"phase": phase, "replicas": 1}
    if startup:
        status["startup"] = startup
    return {"metadata": {"name": name, "namespace": "dev-jane", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"owner": owner, "flavor": "gpu-2"}, "status": status}


def complete(ready_at, **phases):
    return {"startedAt": "2026-01-01T00:00:00Z", "readyAt": ready_at, "complete": True,
            "totalSeconds": sum(phases.values()), "phases": phases}


def samples(store):
    registry = CollectorRegistry()
    registry.register(Collector(store))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


FIRST = complete("2026-01-01T00:00:40Z", queued=12, scheduled=1, volumes=3, containers=20, ready=4)
SECOND = complete("2026-01-02T00:00:09Z", queued=0, scheduled=1, volumes=2, containers=5, ready=1)


@pytest.mark.parametrize("name,changes,phase,count,total", [
    ("a start in progress is not observed",
     [server("a", "Provisioning", {"startedAt": "2026-01-01T00:00:00Z", "phases": {"queued": 12}, "complete": False})],
     "queued", None, None),
    ("a complete start once, however often it is seen", [server("a", startup=FIRST)] * 3, "queued", 1, 12),
    ("each start of a server", [server("a", startup=FIRST), server("a", startup=SECOND)], "containers", 2, 25),
    ("two servers", [server("a", startup=FIRST), server("b", startup=SECOND)], "ready", 2, 5),
])
def test_time_to_ready_by_phase(name, changes, phase, count, total):
    store = Store(clock=lambda: 0.0)
    store.apply_flavor(FLAVOR)
    for obj in changes:
        store.apply(obj)
    got = samples(store)
    labels = (("flavor", "gpu-2"), ("phase", phase))
    assert got.get(("torchdev_time_to_ready_phase_seconds_count", labels)) == count, name
    assert got.get(("torchdev_time_to_ready_phase_seconds_sum", labels)) == total, name
    if count:  # the whole start too, once per start
        assert got[("torchdev_time_to_ready_seconds_count", (("flavor", "gpu-2"),))] == count
        assert got[("torchdev_time_to_ready_phase_seconds_bucket", tuple(sorted(labels + (("le", "+Inf"),))))] == count


def test_phase_sums_add_up_to_the_total():
    store = Store(clock=lambda: 0.0)
    store.apply_flavor(FLAVOR)
    store.apply(server("a", startup=FIRST))
    got = samples(store)
    by_phase = sum(v for (n, labels), v in got.items() if n == "torchdev_time_to_ready_phase_seconds_sum")
    assert by_phase == got[("torchdev_time_to_ready_seconds_sum", (("flavor", "gpu-2"),))] == 40
