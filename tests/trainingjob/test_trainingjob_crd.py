"""The TrainingJob CRD (config/crd/bases/torchdev.io_trainingjobs.yaml): admission through
kubesim (OpenAPI schema, defaults, CEL rules incl. transition rules), in process and over
HTTP; seed 001's examples (tests/data/seed001, only the group changed) are accepted as
written.  The structural checks every torchdev CRD gets (descriptions, bounds,
metav1.Conditions, no preserve-unknown-fields) are in tests/test_crds.py."""
from __future__ import annotations

import copy

import pytest

from _support import admission_model, rejected
from _tj_helpers import CRD, GROUP, VERSION, load, seed_examples, tj


@pytest.fixture(scope="module")
def model():
    return admission_model(CRD)


def _reject(model, obj, old=None) -> str:
    return rejected(model, obj, old)


def test_names_and_columns():
    crd = load(CRD)
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "trainingjobs.torchdev.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["tj"]
    assert set(spec["names"]["categories"]) == {"all", "torchdev"}
    v = spec["versions"][0]
    assert v["name"] == "v1alpha1" and v["subresources"] == {"status": {}}
    assert [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")] == \
        ["State", "Progress", "Epoch", "Restarts", "Age"]


def test_defaults(model):
    out = model.admit(tj())
    spec = out["spec"]
    assert spec["gpusPerWorker"] == 1 and spec["framework"] == "pytorch"
    assert spec["hyperparameters"] == {"learningRate": 0.001, "batchSize": 32, "epochs": 1, "optimizer": "adam",
                                       "warmupSteps": 0, "gradientAccumulationSteps": 1, "mixedPrecision": False}
    assert spec["checkpoint"] == {"enabled": False, "frequency": 1, "retention": 3,
                                  "storage": {"type": "pvc", "size": "10Gi", "mountPath": "/checkpoints"}}
    assert spec["failurePolicy"] == {"restartPolicy": "OnFailure", "backoffLimit": 3}
    assert spec["networking"] == {"backend": "nccl", "masterPort": 29500, "rdmaEnabled": False}
    assert spec["suspend"] is False


@pytest.mark.parametrize("doc", seed_examples(), ids=lambda d: d["metadata"]["name"])
def test_seed_examples_are_accepted_as_written(model, doc):
    out = model.admit(copy.deepcopy(doc))
    for key, value in doc["spec"].items():
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, dict):
                    assert all(out["spec"][key][k][kk] == vv for kk, vv in v.items()), (key, k)
                else:
                    assert out["spec"][key][k] == v, (key, k)
        else:
            assert out["spec"][key] == value, key


VALID = [
    ("cpu gloo", {"gpusPerWorker": 0, "networking": {"backend": "gloo"}}),
    ("s3 checkpoints", {"checkpoint": {"enabled": True, "storage": {"type": "s3", "s3Bucket": "ckpt",
                                                                   "secretName": "aws", "s3Endpoint": "http://minio:9000"}}}),
    ("user claim", {"checkpoint": {"enabled": True, "storage": {"type": "pvc", "claimName": "my-claim"}}}),
    ("gpu limit equal", {"gpusPerWorker": 2, "resources": {"limits": {"nvidia.com/gpu": "2"}}}),
    ("policies", {"failurePolicy": {"backoffLimit": 0, "activeDeadlineSeconds": 60},
                  "successPolicy": {"targetAccuracy": 0.9, "earlyStoppingPatience": 3}}),
]


@pytest.mark.parametrize("spec", [v[1] for v in VALID], ids=[v[0] for v in VALID])
def test_valid(model, spec):
    model.admit(tj(**spec))


INVALID = [
    ("zero workers", {"numWorkers": 0}, "spec.numWorkers"),
    ("too many workers", {"numWorkers": 101}, "spec.numWorkers"),
    ("unknown optimizer", {"hyperparameters": {"optimizer": "lamb"}}, "spec.hyperparameters.optimizer"),
    ("negative lr", {"hyperparameters": {"learningRate": -1}}, "spec.hyperparameters.learningRate"),
    ("gcs storage", {"checkpoint": {"storage": {"type": "gcs"}}}, "spec.checkpoint.storage.type"),
    ("azure storage", {"checkpoint": {"storage": {"type": "azure"}}}, "spec.checkpoint.storage.type"),
    ("gcs resume", {"checkpoint": {"resumeFrom": "gs://b/x"}}, "GCS and Azure storage are not supported"),
    ("s3 without bucket", {"checkpoint": {"storage": {"type": "s3"}}}, "s3Bucket is required"),
    ("bucket on pvc", {"checkpoint": {"storage": {"type": "pvc", "s3Bucket": "b1x"}}}, "belong to type s3"),
    ("s3 resume on pvc", {"checkpoint": {"resumeFrom": "s3://b/x"}}, "needs storage.type s3"),
    ("gpu limit differs", {"gpusPerWorker": 1, "resources": {"limits": {"nvidia.com/gpu": 4}}},
     "must equal gpusPerWorker"),
    ("nccl without gpus", {"gpusPerWorker": 0}, "networking.backend nccl needs gpusPerWorker"),
    ("reserved env", {"env": [{"name": "WORLD_SIZE", "value": "8"}]}, "env must not set"),
    ("tensorflow", {"framework": "tensorflow"}, "spec.framework"),
    ("bad restart policy", {"failurePolicy": {"restartPolicy": "Always"}}, "spec.failurePolicy.restartPolicy"),
    ("accuracy above 1", {"successPolicy": {"targetAccuracy": 1.5}}, "spec.successPolicy.targetAccuracy"),
    ("port too low", {"networking": {"masterPort": 80}}, "spec.networking.masterPort"),
]


@pytest.mark.parametrize("spec,text", [(c[1], c[2]) for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid(model, spec, text):
    assert text in _reject(model, tj(**spec))


def test_long_name_rejected(model):
    assert "metadata.name" in _reject(model, tj(name="x" * 51))


def test_immutable_fields_and_mutable_suspend(model):
    old = model.admit(tj())
    new = copy.deepcopy(old)
    new["spec"]["numWorkers"] = 4
    assert "numWorkers is immutable" in _reject(model, new, old=old)
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = True
    assert model.admit(new, old=old)["spec"]["suspend"] is True


def test_status_fields_of_both_writers(model):
    from kubesim.errors import ApiError

    obj = model.admit(tj())
    obj["status"] = {"state": "Running", "progress": "45%", "currentEpoch": 2, "totalEpochs": 3,
                     "metrics": {"loss": 0.45, "accuracy": 0.89}, "restartCount": 1,
                     "workers": {"active": 2}, "latestCheckpoint": {"path": "/checkpoints/epoch-00002", "epoch": 2},
                     "result": {"reason": "TargetAccuracyReached", "message": "accuracy 0.9 >= 0.9"}}
    model.admit(obj, old=obj, subresource="status")
    bad = copy.deepcopy(obj)
    bad["status"]["state"] = "Exploded"
    with pytest.raises(ApiError):
        model.admit(bad, old=obj, subresource="status")


# -- over HTTP: kubesim as an API server, the seeds applied by a client ----------------------
@pytest.fixture(scope="module")
def crd_api(kubesim_module):
    from kubernetes import client, config

    api = config.new_client_from_config(kubesim_module.kubeconfig)
    client.ApiextensionsV1Api(api).create_custom_resource_definition(load(CRD))
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tj-http"}})
    return client.CustomObjectsApi(api)


def test_api_server_accepts_seeds_and_rejects_gcs(crd_api):
    from kubernetes.client import ApiException

    for doc in seed_examples():
        doc = copy.deepcopy(doc)
        doc["metadata"].pop("namespace", None)
        created = crd_api.create_namespaced_custom_object(GROUP, VERSION, "tj-http", "trainingjobs", doc)
        assert "status" not in created or not created["status"].get("state")  # status is the subresource's
    with pytest.raises(ApiException) as err:
        crd_api.create_namespaced_custom_object(GROUP, VERSION, "tj-http", "trainingjobs",
                                                tj("gcs", namespace="tj-http", checkpoint={"storage": {"type": "gcs"}}))
    assert err.value.status == 422 and "spec.checkpoint.storage.type" in err.value.body
    assert "Unsupported value" in err.value.body and "pvc" in err.value.body, err.value.body
