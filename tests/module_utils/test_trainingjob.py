"""Table-driven tests of plugins/module_utils/trainingjob.py (spec rules and rendering inputs)."""

import json

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob as tj


def _spec(**kw):
    base = {"model": "mlp", "dataset": "synthetic", "numWorkers": 2}
    base.update(kw)
    return base


PROBLEMS = [
    ({}, None),
    ({"gpusPerWorker": 0, "networking": {"backend": "gloo"}}, None),
    ({"framework": "jax"}, "spec.framework"),
    ({"numWorkers": 0}, "spec.numWorkers"),
    ({"checkpoint": {"storage": {"type": "gcs"}}}, "GCS and Azure are out of scope"),
    ({"checkpoint": {"storage": {"type": "s3"}}}, "spec.checkpoint.storage.s3Bucket"),
    ({"gpusPerWorker": 2, "resources": {"limits": {"nvidia.com/gpu": 4}}}, "spec.resources.limits"),
    ({"env": [{"name": "TORCHDEV_NAME", "value": "x"}]}, "spec.env: TORCHDEV_NAME"),
    ({"env": [{"name": "NODE_RANK", "value": "1"}]}, "spec.env: NODE_RANK"),
    ({"gpusPerWorker": 0}, "spec.networking.backend"),  # nccl without GPUs
]


# Checkpoint locations (issue 25.4): the effective S3 prefix of a job in namespace dev-alice, or
# the rejection naming the field.  A prefix outside the namespace is put under it; '.', '..' and
# empty segments are rejected; resumeFrom must be under the namespace's prefix or in the volume.
S3 = {"enabled": True, "storage": {"type": "s3", "s3Bucket": "shared"}}
PVC = {"enabled": True, "storage": {"type": "pvc"}}
CHECKPOINT_PLACES = [
    # (checkpoint spec over S3/PVC, effective uri or None, text of the problem or None)
    ({}, "s3://shared/dev-alice/job", None),
    ({"s3Prefix": "dev-bob/job"}, "s3://shared/dev-alice/dev-bob/job", None),
    ({"s3Prefix": "/dev-bob/job/"}, "s3://shared/dev-alice/dev-bob/job", None),
    ({"s3Prefix": "dev-alice/job"}, "s3://shared/dev-alice/job", None),
    ({"s3Prefix": "dev-alice"}, "s3://shared/dev-alice", None),
    ({"s3Prefix": "dev-alice-evil/job"}, "s3://shared/dev-alice/dev-alice-evil/job", None),
    ({"s3Prefix": "/"}, "s3://shared/dev-alice", None),
    ({"s3Prefix": "dev-alice/../dev-bob/job"}, None, "spec.checkpoint.storage.s3Prefix"),
    ({"s3Prefix": "../dev-bob"}, None, "spec.checkpoint.storage.s3Prefix"),
    ({"s3Prefix": "a/./b"}, None, "spec.checkpoint.storage.s3Prefix"),
    ({"s3Prefix": "a//b"}, None, "spec.checkpoint.storage.s3Prefix"),
    ({"s3Prefix": "a\\..\\b"}, None, "spec.checkpoint.storage.s3Prefix"),
    ({"s3Prefix": 7}, None, "spec.checkpoint.storage.s3Prefix"),
    ({"resumeFrom": "s3://shared/dev-alice/old/epoch-00010"}, "s3://shared/dev-alice/job", None),
    ({"resumeFrom": "s3://other/dev-alice/old/epoch-00010/"}, "s3://shared/dev-alice/job", None),
    ({"resumeFrom": "s3://shared/dev-bob/job/epoch-00010"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "s3://shared/dev-alice-evil/epoch-00010"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "s3://shared/dev-alice/../dev-bob/epoch-00010"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "s3://shared//dev-alice/epoch-00010"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "s3:///dev-alice/epoch-00010"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "/checkpoints/x/epoch-00001"}, None, "spec.checkpoint.resumeFrom"),  # a path with s3
    ({"resumeFrom": ["s3://shared/dev-alice/epoch-00001"]}, None, "spec.checkpoint.resumeFrom"),
]
PVC_PLACES = [  # (checkpoint spec over PVC, its uri, text of the problem or None)
    ({"resumeFrom": "/checkpoints/old/epoch-00003"}, "/checkpoints/job", None),
    ({"resumeFrom": "/data/epoch-00003", "storage": {"type": "pvc", "mountPath": "/data/"}}, "/data/job", None),
    ({"resumeFrom": "/checkpoints/../etc/epoch-00003"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "/checkpoints-other/epoch-00003"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "/checkpoints"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "checkpoints/old/epoch-00003"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "/tmp/planted/epoch-00003"}, None, "spec.checkpoint.resumeFrom"),
    ({"resumeFrom": "/checkpoints/./old//epoch-00003"}, None, "spec.checkpoint.resumeFrom"),
]


@pytest.mark.parametrize("base,over,uri,text", [(S3, *row) for row in CHECKPOINT_PLACES] +
                         [(PVC, *row) for row in PVC_PLACES])
def test_checkpoints_stay_in_the_namespace(base, over, uri, text):
    ckpt = json.loads(json.dumps(base))
    for key, value in over.items():
        (ckpt["storage"] if key.startswith("s3") else ckpt)[key] = value
    spec = _spec(checkpoint=ckpt)
    problem = tj.spec_problem(spec, "job", "dev-alice")
    if text is None:
        assert problem is None, problem
        env = {e["name"]: e.get("value") for e in tj.env(spec, "job", "dev-alice")}
        assert env["TORCHDEV_CHECKPOINT_URI"] == uri == tj.checkpoint_uri(spec, "job", "dev-alice")
    else:
        assert problem["reason"] == "InvalidSpec" and problem["message"].startswith(text), problem
        assert "dev-bob" not in tj.checkpoint_uri(spec, "job", "dev-alice").partition("dev-alice/")[0]


@pytest.mark.parametrize("spec,text", PROBLEMS)
def test_spec_problem(spec, text):
    problem = tj.spec_problem(_spec(**spec), "train", "ml")
    if text is None:
        assert problem is None
    else:
        assert problem["reason"] in ("InvalidSpec", "InsufficientGPUs") and text in problem["message"], problem


def test_env_rendezvous_from_completion_index():
    env = tj.env(_spec(gpusPerWorker=2, networking={"masterPort": 23456}), "bert", "ml", attempt=1)
    by = {e["name"]: e for e in env}
    assert by["MASTER_ADDR"]["value"] == "bert-0.bert.ml.svc.cluster.local"
    assert by["MASTER_PORT"]["value"] == "23456"
    assert by["TORCHDEV_RDZV_ENDPOINT"]["value"] == "bert-0.bert.ml.svc.cluster.local:23456"
    assert by["WORLD_SIZE"]["value"] == "4" and by["NNODES"]["value"] == "2" and by["NPROC_PER_NODE"]["value"] == "2"
    assert by["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert by["TORCHDEV_ATTEMPT"]["value"] == "1" and by["TORCHDEV_BACKEND"]["value"] == "nccl"
    assert by["NCCL_SOCKET_IFNAME"]["value"] == "eth0"
    assert "TORCHDEV_CHECKPOINT_URI" not in by
    names = [e["name"] for e in env]
    assert names == sorted(names)


@pytest.mark.parametrize("storage,uri,extra", [
    ({"type": "pvc"}, "/checkpoints/bert", {}),
    ({"type": "pvc", "claimName": "mine", "mountPath": "/data/ckpt"}, "/data/ckpt/bert", {}),
    ({"type": "s3", "s3Bucket": "ckpts", "s3Endpoint": "http://minio:9000", "secretName": "aws"},
     "s3://ckpts/ml/bert", {"AWS_ENDPOINT_URL": "http://minio:9000"}),
    # the prefix is always under the namespace (issue 25.4): "ml/" is put in front
    ({"type": "s3", "s3Bucket": "ckpts", "s3Prefix": "/runs/b/"}, "s3://ckpts/ml/runs/b", {}),
    ({"type": "s3", "s3Bucket": "ckpts", "s3Prefix": "dev-bob/bert"}, "s3://ckpts/ml/dev-bob/bert", {}),
    ({"type": "s3", "s3Bucket": "ckpts", "s3Prefix": "ml/runs/bert"}, "s3://ckpts/ml/runs/bert", {}),
])
def test_env_checkpoints(storage, uri, extra):
    spec = _spec(gpusPerWorker=0, networking={"backend": "gloo"},
                 checkpoint={"enabled": True, "frequency": 2, "retention": 5, "storage": storage},
                 successPolicy={"targetAccuracy": 0.9}, env=[{"name": "USER_VAR", "value": "1"}])
    env = tj.env(spec, "bert", "ml")
    by = {e["name"]: e for e in env}
    assert by["TORCHDEV_CHECKPOINT_URI"]["value"] == uri
    assert by["TORCHDEV_CHECKPOINT_RETENTION"]["value"] == "5" and by["TORCHDEV_CHECKPOINT_FREQUENCY"]["value"] == "2"
    assert by["TORCHDEV_TARGET_ACCURACY"]["value"] == "0.9"
    for k, v in extra.items():
        assert by[k]["value"] == v
    if storage.get("secretName"):
        assert by["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "aws", "key": "AWS_SECRET_ACCESS_KEY"}
    else:
        assert "AWS_ACCESS_KEY_ID" not in by
    assert env[-1] == {"name": "USER_VAR", "value": "1"}  # the user's last, in order


@pytest.mark.parametrize("spec,claim", [
    ({}, ""),
    ({"checkpoint": {"enabled": True}}, "bert-checkpoints"),
    ({"checkpoint": {"enabled": True, "storage": {"claimName": "mine"}}}, "mine"),
    ({"checkpoint": {"enabled": True, "storage": {"type": "s3", "s3Bucket": "b"}}}, ""),
])
def test_checkpoint_claim(spec, claim):
    assert tj.checkpoint_claim(_spec(**spec), "bert") == claim


def test_resources_and_tolerations():
    spec = _spec(gpusPerWorker=2, resources={"requests": {"cpu": 4, "memory": "16Gi"}})
    assert tj.resources(spec) == {"limits": {"nvidia.com/gpu": "2"},
                                  "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}}
    assert tj.tolerations(spec) == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    cpu = _spec(gpusPerWorker=0)
    assert tj.resources(cpu) == {} and tj.tolerations(cpu) == []


def test_hyperparameters_document():
    doc = json.loads(tj.hyperparameters(_spec(hyperparameters={"learningRate": 0.1, "additionalParams": {"wd": "0.01"}})))
    assert doc["learningRate"] == 0.1 and doc["epochs"] == 1 and doc["optimizer"] == "adam"
    assert doc["additionalParams"] == {"wd": "0.01"} and doc["model"] == "mlp"


def test_trainer_rules_are_least_privilege():
    rules = tj.trainer_rules("bert")
    assert all(r["resourceNames"] == ["bert"] for r in rules)
    assert {(r["resources"][0], tuple(r["verbs"])) for r in rules} == {
        ("trainingjobs", ("get",)), ("trainingjobs/status", ("get", "patch"))}


@pytest.mark.parametrize("live,queued,want", [
    (None, False, None),
    (None, True, True),
    ({"spec": {"suspend": False}}, True, False),
    ({"spec": {"suspend": True}}, True, True),
])
def test_keep_suspend(live, queued, want):
    objs = [{"kind": "Job", "spec": {"parallelism": 2}}, {"kind": "Service", "spec": {}}]
    out = tj.keep_suspend(objs, live, queued)
    assert out[0]["spec"].get("suspend") == want and out[1] == objs[1]


_LIVE_TEMPLATE = {"metadata": {"labels": {"controller-uid": "u"}},
                  "spec": {"containers": [{"name": "worker", "image": "old:1", "terminationMessagePath": "/dev/x"}]}}


@pytest.mark.parametrize("live,image,kept", [
    (None, "new:2", False),  # no Job yet: created from the new spec
    ({"spec": {"template": _LIVE_TEMPLATE}}, "old:1", False),  # unchanged: the rendered template stays
    ({"spec": {"template": _LIVE_TEMPLATE}}, "new:2", True),  # running: it keeps its template
    ({"spec": {"suspend": True, "template": _LIVE_TEMPLATE}}, "new:2", False),  # suspended: mutable
    ({"metadata": {"deletionTimestamp": "t"}, "spec": {"template": _LIVE_TEMPLATE}}, "new:2", False),
])
def test_keep_live_template(live, image, kept):
    job = {"kind": "Job", "metadata": {"annotations": {"h": "x"}}, "spec": {"parallelism": 2, "template": {
        "spec": {"containers": [{"name": "worker", "image": image}]}}}}
    objs = [job, {"kind": "Service", "spec": {}}]
    out = tj.keep_live_template(objs, live)
    assert out[0]["spec"]["template"] == (_LIVE_TEMPLATE if kept else job["spec"]["template"])
    assert out[0]["metadata"] == job["metadata"] and out[0]["spec"]["parallelism"] == 2 and out[1] == objs[1]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == image  # the input is not changed


@pytest.mark.parametrize("annotations,attempt", [({}, None), ({"torchdev.io/attempt": "2"}, 2), ({"torchdev.io/attempt": "x"}, None)])
def test_attempt_of(annotations, attempt):
    assert tj.attempt_of({"metadata": {"annotations": annotations}}) == attempt


@pytest.mark.parametrize("checkpoint", [None, "x", {"storage": "x"}, {"storage": None}, {"storage": []},
                                        {"resumeFrom": {"a": 1}, "storage": {"type": "s3", "s3Prefix": ["a"]}}])
def test_checkpoint_places_of_hostile_shapes_never_raise(checkpoint):
    spec = _spec(checkpoint=checkpoint)
    problem = tj.checkpoint_problem(spec, "dev-alice")
    assert problem is None or problem.startswith("spec.checkpoint"), problem
    assert tj.s3_prefix(spec, "job", "dev-alice") in ("", "dev-alice/job")
