"""Issue 17, item 3: watch disruption.

The operator's watches are disrupted three ways, and changes are made exactly when a watch
cannot deliver them; each change must still be acted on (no missed change):

1. the server ends every watch (as at its watch timeout), again and again, changes in between;
2. ``410 Gone`` on resume: while the watches cannot reconnect, changes are made and the event
   history is compacted, so the informers' resourceVersion is too old: they must list again;
3. a restart of the API server that keeps its store: changes while it is down, and it comes
   back with no event history (a fresh watch cache), so every resume is 410 Gone too.

The changes: a spec change (generation), a deleted child (a dependent's DELETE event), a new
DevServer (ADDED) and a deleted DevServer (its finalizer runs)."""
from __future__ import annotations

import time

import pytest

from _workload import DEVSERVERS, Burst, Primary, converged, devserver, get

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def setup(sim):
    from _reliability import new_runtime

    burst = Burst(sim, "wd", servers=3, distributed=1)
    with new_runtime(sim) as rt:
        burst.create()
        burst.wait_converged(600)
        assert rt.wait_idle(120)
        yield sim, rt, burst


class Changes:
    """Changes made while the watches are down, and the check that each was acted on."""

    def __init__(self, sim, burst: Burst, round_: int):
        self.sim, self.burst, self.round = sim, burst, round_
        self.ns = burst.server_namespaces[-1]
        self.new = Primary(DEVSERVERS, self.ns, f"wdnew{round_}", "server-retain")

    def make(self) -> None:
        servers = [p for p in self.burst.primaries if p.resource == DEVSERVERS]
        self.changed, self.child_of, self.deleted = servers[0], servers[1], servers[-1]
        self.sim.call(self.sim.api.patch, DEVSERVERS, self.changed.namespace, self.changed.name,
                      {"spec": {"env": [{"name": "DISRUPTION_ROUND", "value": str(self.round)}]}})
        self.sim.call(self.sim.api.delete, "configmaps", self.child_of.namespace, f"{self.child_of.name}-ssh")
        self.sim.call(self.sim.api.create, DEVSERVERS, devserver(self.new.name, "server-retain"), self.ns)
        self.sim.call(self.sim.api.delete, DEVSERVERS, self.deleted.namespace, self.deleted.name)
        self.burst.primaries.remove(self.deleted)
        self.burst.primaries.append(self.new)

    def pending(self) -> list[str]:
        out = []
        for p in (self.changed, self.new):
            why = converged(self.sim, p)
            if why:
                out.append(f"{p}: {why}")
        sts = get(self.sim, "statefulsets.apps", self.changed.namespace, self.changed.name) or {}
        container = ((((sts.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [{}])[0]
        if {"name": "DISRUPTION_ROUND", "value": str(self.round)} not in (container.get("env") or []):
            out.append(f"{self.changed}: spec change not rendered")
        if get(self.sim, "configmaps", self.child_of.namespace, f"{self.child_of.name}-ssh") is None:
            out.append(f"{self.child_of}: deleted ConfigMap not recreated")
        if get(self.sim, DEVSERVERS, self.deleted.namespace, self.deleted.name) is not None:
            out.append(f"{self.deleted}: still there (finalizer not run)")
        return out

    def wait(self, timeout: float = 300) -> float:
        start = time.monotonic()
        last: list[str] = []

        def done():
            last[:] = self.pending()
            return not last
        try:
            self.sim.wait_for(done, timeout, interval=0.2, message="every change acted on")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: missed: {last}") from None
        return time.monotonic() - start


def relists(rt) -> int:
    with rt._inf_lock:
        return sum(i.relists for i in rt._informers.values())


def watches_refused(sim):
    """Every watch request fails (500) until the rule is removed: nothing reconnects meanwhile."""
    return sim.faults.add(verb="watch", fraction=1.0, code=500)


def test_watches_ended_by_the_server_miss_no_change(setup, figures):
    sim, rt, burst = setup
    times = []
    for round_ in range(3):
        ended = sim.end_watches()
        assert ended > 0  # the operator's informers had open watches
        changes = Changes(sim, burst, round_)
        changes.make()
        times.append(round(changes.wait(), 1))
    assert rt.wait_idle(120)
    figures("item 3: watches ended by the server", {"rounds": 3, "acted_on_all_changes_s": times})


def test_410_gone_on_resume_relists_and_misses_no_change(setup, figures):
    sim, rt, burst = setup
    before = relists(rt)
    rule = watches_refused(sim)
    sim.end_watches()
    changes = Changes(sim, burst, 10)
    changes.make()
    sim.compact()  # the informers' resourceVersions are now too old
    sim.call(sim.cluster.faults.rules.remove, rule)
    took = changes.wait()
    after = relists(rt)
    assert after > before, "no informer listed again after 410 Gone"
    assert rt.wait_idle(120)
    figures("item 3: 410 Gone on resume", {"relists": after - before, "acted_on_all_changes_s": round(took, 1)})


def test_api_server_restart_keeping_its_store_misses_no_change(setup, figures):
    sim, rt, burst = setup
    before = relists(rt)
    sim.stop_http()
    down = time.monotonic()
    changes = Changes(sim, burst, 20)
    changes.make()  # while the server is down: no watch can see them
    sim.start_http(compact=True)
    down_s = time.monotonic() - down
    took = changes.wait()
    after = relists(rt)
    assert after > before, "no informer listed again after the restart"
    burst.wait_converged(300)
    assert rt.wait_idle(120)
    figures("item 3: API server restart (store kept)", {
        "down_s": round(down_s, 1), "relists": after - before,
        "acted_on_all_changes_s": round(took, 1)})
