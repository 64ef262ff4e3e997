"""Issue 17, item 2: the operator killed with SIGKILL at random points of its reconciles.

The operator runs as a process of its own (``python -m torchdev_runtime``). A burst of objects of
every kind is created; then, again and again, more work arrives (a new DevServer, a spec change
of an existing one) and the operator is SIGKILLed after a random number of its write requests
(a point inside its reconciles: a run is killed between two of its writes), or when it went
idle first. Each time it is started again:

* every object converges (the time it takes is a figure);
* no reconcile after the restart writes what was already correct: no write request after the
  restart leaves its object unchanged (kubesim logs such no-op writes), and an object that had
  converged before the kill gets no write at all.

``make test`` kills it twice; ``make soak`` 20 times, during a larger burst."""
from __future__ import annotations

import random
import re
import time

import pytest

from _operator_process import OperatorProcess
from _workload import DEVSERVERS, Burst, Primary, converged, get

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WRITES = ("create", "update", "patch", "delete", "deletecollection")
SMALL = {"kills": 2, "burst": {"servers": 1, "distributed": 1, "users": 1, "trainingjobs": 1, "eajs": 1}}
FULL = {"kills": 20, "burst": {"servers": 12, "distributed": 4, "users": 4, "trainingjobs": 4, "eajs": 4}}


def target(path: str) -> tuple[str, str] | None:
    """(namespace, name) of the object a request path addresses ("" namespace: cluster-scoped)."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"]:
        if len(rest) >= 4:
            return rest[1], rest[3]
        return ("", rest[1]) if len(rest) >= 2 else None
    return ("", rest[1]) if len(rest) >= 2 else None


def owner_of(path: str, primaries: list[Primary]) -> Primary | None:
    """The primary a write belongs to: the object itself, or one named after it in its namespace
    (<name>, <name>-..., home-<name>-<i>, Events <name>.<time>); a DevUser's: its namespace and
    what is in it but a server's."""
    found = target(path)
    if found is None:
        return None
    ns, name = found
    for p in primaries:
        if p.namespace == ns and re.match(rf"^(home-)?{re.escape(p.name)}([-.]|$)", name):
            return p
    for p in primaries:
        if not p.namespace and ((ns == "" and name in (p.name, f"dev-{p.name}")) or ns == f"dev-{p.name}"):
            return p
    return None


def writes_since(sim, since: float) -> list[dict]:
    return [r for r in sim.requests(20000) if r["verb"] in WRITES and r["time"] >= since and r["code"]]


@pytest.mark.parametrize("size", [
    pytest.param(SMALL, id="small"),
    pytest.param(FULL, id="full", marks=[pytest.mark.soak, pytest.mark.timeout(7200)]),
])
def test_sigkill_at_random_points_converges_without_rewriting(sim, size, figures):
    rnd = random.Random(2017)
    burst = Burst(sim, f"rs{size['kills']}", **size["burst"])
    op = OperatorProcess(sim.kubeconfig).start()
    cycles = []
    try:
        burst.create()
        extra = 0
        for kill in range(size["kills"]):
            since = time.time() if kill else op.started_at
            # more work: a new server, and a changed one
            if kill:
                new = Primary(DEVSERVERS, burst.server_namespaces[-1], f"{burst.prefix}n{extra}", "server-retain")
                extra += 1
                burst.primaries.append(new)
                burst._create(new)
                changed = rnd.choice([p for p in burst.primaries if p.resource == DEVSERVERS])
                sim.call(sim.api.patch, DEVSERVERS, changed.namespace, changed.name,
                         {"spec": {"env": [{"name": "RELIABILITY_CYCLE", "value": str(kill)}]}})
            # a random point: after k of the operator's writes since it started, or once it is idle
            k = rnd.randint(1, 8)
            sim.wait_for(lambda: len(writes_since(sim, since)) >= k or (op.busy() is False and op.reconciles() > 0),
                         600, interval=0.05, message=f"{k} writes of the operator")
            writes_before = len(writes_since(sim, since))
            op.kill()
            killed_at = time.time()
            settled_before = {p for p in burst.primaries if converged(sim, p) is None}
            at_kill = {p: get(sim, p.resource, p.namespace, p.name) for p in settled_before}
            # what the killed operator had in flight finishes (or dies) before the next one starts
            sim.wait_for(lambda: not op.leftovers(), 120, interval=0.1, message="the killed operator's processes gone")
            leftover_writes = len(writes_since(sim, killed_at))
            op = OperatorProcess(sim.kubeconfig).start()
            restarted = op.started_at
            converge_s = burst.wait_converged(1800)
            # the restarted operator went over every object (an ADDED event each) and is idle again
            sim.wait_for(lambda: op.reconciles() >= len(burst.primaries) and op.busy() is False, 600, interval=0.2,
                         message="the restarted operator idle")
            after = writes_since(sim, restarted)
            noop = [w for w in after if w.get("noop")]
            rewritten = sorted({str(owner_of(w["path"], burst.primaries)) for w in after
                                if owner_of(w["path"], burst.primaries) in settled_before})
            cycles.append({"kill": kill + 1, "writes_before_kill": writes_before, "in_flight_writes": leftover_writes,
                           "converge_s": round(converge_s, 1), "writes_after_restart": len(after),
                           "noop_writes": len(noop), "settled_at_kill": len(settled_before),
                           "settled_objects_rewritten": rewritten})
            assert noop == [], f"kill {kill + 1}: writes that changed nothing: {[w['path'] for w in noop]}"
            assert rewritten == [], (f"kill {kill + 1}: objects converged before the kill were written: {rewritten}: "
                                     f"{[(w['verb'], w['path']) for w in after if str(owner_of(w['path'], burst.primaries)) in rewritten]}; "
                                     f"status at the kill and now: "
                                     f"{[(at_kill[p].get('status'), get(sim, p.resource, p.namespace, p.name).get('status')) for p in at_kill if str(p) in rewritten]}")
        assert all(converged(sim, p) is None for p in burst.primaries)
        assert get(sim, "namespaces", "", burst.server_namespaces[-1]) is not None
    except BaseException:
        print(op.tail())
        raise
    finally:
        op.stop()
    figures("item 2: operator restarts", {
        "kills": size["kills"], "objects": len(burst.primaries),
        "converge_after_restart_s": [c["converge_s"] for c in cycles],
        "writes_after_restart": [c["writes_after_restart"] for c in cycles],
        "noop_writes_after_restart": sum(c["noop_writes"] for c in cycles),
        "settled_objects_rewritten": sum(len(c["settled_objects_rewritten"]) for c in cycles),
        "cycles": cycles})
