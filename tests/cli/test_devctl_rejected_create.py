"""devctl create --wait on a spec the operator rejects for good (issue 28.6): the operator's
message is printed once, in the one error line, and the DevServer devctl just created (it never
ran: no pod, no data) is deleted rather than left behind; home volumes are never touched."""
from __future__ import annotations

import threading
import time

import pytest

from devctl_helpers import OWNER

MESSAGE = "backend nccl needs GPUs: flavor cpu-small has none (use --backend gloo)"


def _operator(cluster, name, reason, message):
    """Play the operator: reject the DevServer as soon as it exists."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and name not in cluster.devserver_names():
        time.sleep(0.02)
    cluster.set_status(name, phase="Pending", observedGeneration=1, conditions=[
        {"type": "Ready", "status": "False", "reason": reason, "message": message,
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Degraded", "status": "True", "reason": reason, "message": message,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}])


@pytest.mark.parametrize("reason, deleted", [("InsufficientGPUs", True), ("InvalidSpec", True),
                                             ("QuotaExceeded", False)])
def test_a_rejected_spec_is_one_error_and_nothing_left(devctl, cluster, reason, deleted):
    cluster.create_pvc("home-keep-0")  # someone's volume of the same name pattern: never touched
    thread = threading.Thread(target=_operator, args=(cluster, "dist", reason, MESSAGE), daemon=True)
    thread.start()
    result = devctl("create", "dist", "--flavor", "cpu-small", "--owner", OWNER, "--distributed", "--replicas", "2",
                    "--backend", "nccl", "--wait", "--timeout", "30s")
    thread.join(5)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors == [result.stderr.strip().splitlines()[-1]], result.stderr
    assert result.stderr.count(MESSAGE) == 1, result.stderr  # once, in the error
    assert f"{reason} ({MESSAGE})" in errors[0]
    if deleted:  # the spec itself cannot run: the server devctl made is gone again
        assert cluster.devserver_names() == []
        assert "devserver dist was deleted" in errors[0] and "left in place" not in errors[0]
    else:        # the namespace's problem (a quota, a claim): the server waits for it, announced
        assert cluster.devserver_names() == ["dist"]
        assert "devserver dist (created) is left in place" in errors[0]
    assert cluster.pvc_names() == ["home-keep-0"]
