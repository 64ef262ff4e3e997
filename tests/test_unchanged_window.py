"""`assert_unchanged_reconcile_writes_nothing` (tests/_e2e_helpers.py): a write in a window where
the cluster's machinery wrote nothing fails at once, naming it; a window in which the machinery
changed the namespace is measured again, and a write in every such window still fails."""
from __future__ import annotations

import pytest

from _e2e_helpers import assert_unchanged_reconcile_writes_nothing


class Runtime:
    def __init__(self):
        self.runs = 0

    def wait_idle(self, timeout):
        return True

    def counters(self, kind):
        return {"succeeded": self.runs}

    def enqueue(self, kind, ns, name):
        self.runs += 1


class Sim:
    """Each window's requests and machinery writes, in order."""

    def __init__(self, windows, machinery=None):
        self.windows, self.machinery, self.window = windows, machinery, -1

    def reset_metrics(self):
        self.window += 1

    def wait_for(self, predicate, timeout, message=""):
        assert predicate()

    def requests(self):
        return self.windows[self.window]

    def machinery_writes(self, ns):
        return self.machinery[self.window] if self.machinery else []


GET = {"verb": "get", "resource": "devservers.torchdev.io"}
PATCH = {"verb": "patch", "resource": "devservers.torchdev.io/status"}
STS = [{"verb": "update", "resource": "statefulsets.apps/status", "name": "ddp"}]


@pytest.mark.parametrize("windows, machinery, passes, measured", [
    ([[GET]], None, True, 1),                                   # reads only
    ([[GET, PATCH]], None, False, 1),                           # a write, the world still: fails at once
    ([[GET, PATCH], [GET]], [STS, []], True, 2),                # the StatefulSet moved: measured again
    ([[PATCH], [PATCH], [PATCH]], [STS, STS, STS], False, 3),   # never a still window: fails
    ([[PATCH], [PATCH], [GET]], [STS, [], []], False, 2),       # the second window is still and writes
])
def test_windows(windows, machinery, passes, measured):
    sim, runtime = Sim(windows, machinery), Runtime()
    if passes:
        assert_unchanged_reconcile_writes_nothing(sim, runtime, "ns", "ddp")
    else:
        with pytest.raises(AssertionError, match="wrote .*'patch'"):
            assert_unchanged_reconcile_writes_nothing(sim, runtime, "ns", "ddp")
    assert runtime.runs == measured
