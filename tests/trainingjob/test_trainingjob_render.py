"""Render every object the trainingjob role creates, without a cluster, and validate it.

One ansible-playbook run includes the role's pure tasks (normalize.yml, render.yml) for the
TrainingJob matrix of hack/render_cases.py (the samples, a user's checkpoint claim, a queued
Kueue Job, a restarting run), through hack/render_manifests.py (the renderer `make checkov`
and tests/security use), and every manifest is validated strictly against the Kubernetes
1.33 OpenAPI schema (all the role renders are built-in kinds).
"""
from __future__ import annotations

import kubernetes_validate
import pytest

from hack import render_manifests
from hack.render_cases import trainingjob_cases

K8S_VERSION = "1.33.0"
CASES = trainingjob_cases()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    cases = {key: render_manifests.trainingjob_hostvars(case) for key, case in CASES.items()}
    return render_manifests.render_roles(tmp_path_factory.mktemp("render"), {"trainingjob": cases})["trainingjob"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_is_valid(rendered, case):
    objects = rendered[case]
    assert objects, case
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - report nicely
            pytest.fail("%s %s/%s invalid: %s" % (case, obj["kind"], obj["metadata"]["name"], exc))


@pytest.mark.parametrize("case", sorted(c for c in CASES if c != "restarting"))
def test_the_job_is_one_indexed_gang(rendered, case):
    """parallelism = completions = numWorkers, Indexed, pods named through the headless Service,
    NODE_RANK from the completion index, the hyperparameters ConfigMap mounted."""
    spec = CASES[case]["cr"]["spec"]
    by_kind = {}
    for obj in rendered[case]:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (job,) = by_kind["Job"]
    js = job["spec"]
    assert js["completionMode"] == "Indexed"
    assert js["parallelism"] == js["completions"] == spec["numWorkers"]
    pod = js["template"]["spec"]
    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    assert pod["subdomain"] in services and services[pod["subdomain"]]["spec"]["clusterIP"] == "None"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"].endswith("batch.kubernetes.io/job-completion-index']")
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_maps = {c["metadata"]["name"] for c in by_kind["ConfigMap"]}
    assert {v["configMap"]["name"] for v in volumes.values() if "configMap" in v} <= config_maps


def test_a_restarting_run_renders_no_job(rendered):
    """Between two attempts the Job of the failed one is gone and the next is not rendered yet."""
    assert "Job" not in {o["kind"] for o in rendered["restarting"]}


def test_a_queued_job_is_created_suspended_with_its_queue(rendered):
    (job,) = [o for o in rendered["kueue_queued"] if o["kind"] == "Job"]
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "torchdev"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "torchdev-high"
