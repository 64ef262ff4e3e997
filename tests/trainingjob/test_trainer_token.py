"""The trainer token reaches rank 0 alone (issue 25.7).

It may patch the TrainingJob's status (the library's progress), so a worker that does not
report should not hold it.  Every pod of the Indexed Job has one template: the projected token
is mounted only in the token-relay sidecar (a native sidecar: an init container that keeps
running), which copies it, and each renewal, into the trainer's token directory on rank 0 and
does nothing on the other ranks.  Rendered as the role renders it (hack/render_manifests.py),
then the relay's own rendered script run for rank 0 and rank 1 against temporary directories.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hack import render_manifests
from hack.render_cases import trainingjob_cases
from kubesim.testing import wait_for

CASES = {k: v for k, v in trainingjob_cases().items() if k != "restarting"}  # restarting renders no Job
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SOURCE = "/var/run/secrets/torchdev/trainer-token"


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    cases = {key: render_manifests.trainingjob_hostvars(case) for key, case in CASES.items()}
    rendered = render_manifests.render_roles(tmp_path_factory.mktemp("render"), {"trainingjob": cases})["trainingjob"]
    return {case: next(o for o in objects if o["kind"] == "Job")["spec"]["template"]["spec"]
            for case, objects in rendered.items()}


def token_volumes(pod) -> set[str]:
    return {v["name"] for v in pod.get("volumes") or []
            if any("serviceAccountToken" in src for src in (v.get("projected") or {}).get("sources") or [])}


def mounts(container) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_the_relay_sidecar_mounts_the_token(pods, case):
    pod = pods[case]
    assert pod["automountServiceAccountToken"] is False
    tokens = token_volumes(pod)
    assert len(tokens) == 1
    holders = [c["name"] for c in pod.get("containers", []) + pod.get("initContainers", [])
               if tokens & set(mounts(c).values())]
    assert holders == ["token-relay"]
    (relay,) = pod["initContainers"]
    assert relay["restartPolicy"] == "Always"  # a native sidecar: runs beside the trainer, renews the copy
    (rank,) = [e for e in relay["env"] if e["name"] == "TORCHDEV_RANK"]
    assert rank["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    trainer = next(c for c in pod["containers"] if c["name"] == "trainer")
    copy = mounts(trainer)[SA_DIR]
    assert mounts(relay)[SA_DIR] == copy
    (volume,) = [v for v in pod["volumes"] if v["name"] == copy]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert next(m for m in trainer["volumeMounts"] if m["mountPath"] == SA_DIR)["readOnly"] is True


def _run(script: str, rank: str, tmp_path):
    """The rendered relay script, its two directories moved under tmp_path."""
    src, dst = tmp_path / ("src" + rank), tmp_path / ("dst" + rank)
    src.mkdir()
    dst.mkdir()
    for name, text in (("token", "tok-" + rank), ("ca.crt", "ca"), ("namespace", "ml")):
        (src / name).write_text(text)
    code = script.replace(SOURCE, str(src)).replace(SA_DIR, str(dst))
    assert str(src) in code and str(dst) in code
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, TORCHDEV_RANK=rank))
    return proc, src, dst


def test_the_relay_copies_the_token_on_rank_0_only_and_follows_its_renewal(pods, tmp_path):
    relay = next(iter(pods.values()))["initContainers"][0]
    assert relay["command"][:2] == ["python3", "-c"]
    script, ready = relay["command"][2], relay["startupProbe"]["exec"]["command"][2]
    one, _, one_dst = _run(script, "1", tmp_path)
    zero, zero_src, zero_dst = _run(script, "0", tmp_path)
    try:
        wait_for(lambda: (zero_dst / "token").exists(), 30, 0.05, "rank 0's token copied")
        assert {p.name for p in zero_dst.iterdir() if not p.name.startswith(".")} == {"token", "ca.crt", "namespace"}
        assert (zero_dst / "token").read_text() == "tok-0"
        (zero_src / "token").write_text("renewed")  # the kubelet renews the projected token
        wait_for(lambda: (zero_dst / "token").read_text() == "renewed", 60, 0.1, "the renewal copied")
        assert one.poll() is None and list(one_dst.iterdir()) == []  # rank 1: alive, no token
    finally:
        for proc in (one, zero):
            proc.kill()
            proc.wait()
    # the startup probe: rank 0 is started once its token is there, the other ranks at once
    for rank, dst, want in (("0", zero_dst, 0), ("1", one_dst, 0), ("0", tmp_path / "empty", 1)):
        code = ready.replace(SA_DIR, str(dst))
        assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TORCHDEV_RANK=rank)).returncode == want
