"""End to end (issue 25.7): a status patch -- what the trainer token may do -- cannot stop,
restart for ever or extend a TrainingJob.  kubesim + the local runtime + the real role: the job
runs, its status is forged (Completed, restartCount 0, startTime in the future), and the
operator puts its own record back and ends the run at its deadline, counted from the real
start."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, VERSION
from test_trainingjob_e2e import NODES, create, get_tj, tj, wait_state, workers  # noqa: F401 (NODES: sim's)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
FORGED = {"state": "Completed", "restartCount": 0, "startTime": "2999-12-31T23:59:59Z",
          "completionTime": "2999-12-31T23:59:59Z", "failureReason": "x"}


def test_a_forged_status_neither_ends_nor_extends_the_run(sim, kube, runtime, ns):
    create(kube, ns, tj("forged", failurePolicy={"activeDeadlineSeconds": 30}))
    start = wait_state(sim, kube, ns, "forged", "Running")["status"]["startTime"]
    record = get_tj(kube, ns, "forged")["metadata"]["annotations"]["torchdev.io/run"]
    kube["custom"].patch_namespaced_custom_object_status(GROUP, VERSION, ns, "trainingjobs", "forged",
                                                         {"status": FORGED})
    runtime.enqueue("TrainingJob", ns, "forged")
    # the operator's next look writes its own fields back: still running, from the real start
    sim.wait_for(lambda: (lambda st: st if st.get("state") == "Running" and st.get("startTime") == start else None)(
        get_tj(kube, ns, "forged")["status"]), 60, interval=0.1, message="the operator's status back")
    assert workers(kube, ns, "forged")
    obj = wait_state(sim, kube, ns, "forged", "Failed", timeout=90)
    assert obj["status"]["failureReason"] == "DeadlineExceeded" and obj["status"]["startTime"] == start
    assert record  # the record existed before the forgery (written with the Job)
    sim.wait_for(lambda: not workers(kube, ns, "forged"), 30, message="workers stopped")
