"""The EphemeralAccelerationJob CRD (config/crd/bases/torchdev.io_ephemeralaccelerationjobs.yaml):
admission through kubesim (OpenAPI schema, defaults, enums, bounds, CEL rules incl. the
transition rule), in process and over HTTP; seed 004's example (tests/data/seed004, only the
group changed) is accepted as written.  The structural checks every torchdev CRD gets
(descriptions, bounds, metav1.Conditions, no preserve-unknown-fields) are in tests/test_crds.py."""
from __future__ import annotations

import copy

import pytest

from _support import admission_model, rejected
from _eaj_helpers import CRD, GROUP, PLURAL, VERSION, eaj, load, seed_examples


@pytest.fixture(scope="module")
def model():
    return admission_model(CRD)


def test_names_and_columns():
    crd = load(CRD)
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "ephemeralaccelerationjobs.torchdev.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["eaj"] and set(spec["names"]["categories"]) == {"all", "torchdev"}
    v = spec["versions"][0]
    assert v["name"] == "v1alpha1" and v["subresources"] == {"status": {}}
    assert [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")] == \
        ["Phase", "Model", "GPUs", "Artifacts", "Age"]


def test_the_documented_reasons_are_the_constants():
    from ansible_collections.torchdev.operator.plugins.module_utils.constants import EAJ_PHASES, EAJ_REASONS

    status = load(CRD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert tuple(status["phase"]["enum"]) == EAJ_PHASES
    text = " ".join(status["conditions"]["description"].split())
    for ctype, reasons in EAJ_REASONS.items():
        assert f"- {ctype}:" in text
        for reason in reasons:
            assert reason in text, (ctype, reason)


def test_defaults(model):
    spec = model.admit(eaj())["spec"]
    assert spec == {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/input.jpg"},
                    "output": {"path": "/artifacts/output.json"}, "resources": {"gpu": 1},
                    "ttlSecondsAfterFinished": 0, "pvcTTLSecondsAfterFinished": 3600, "pvcSize": "1Gi",
                    "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}


@pytest.mark.parametrize("doc", seed_examples(), ids=lambda d: d["metadata"]["name"])
def test_seed_example_is_accepted_as_written(model, doc):
    out = model.admit(copy.deepcopy(doc))
    assert out["spec"] == doc["spec"]
    obj = copy.deepcopy(out)
    obj["status"] = doc["status"]
    assert model.admit(obj, old=out, subresource="status")["status"] == doc["status"]


VALID = [
    ("mobilenet", {"model": "mobilenet_v3_small"}),
    ("torchscript file", {"model": "/artifacts/models/net.pt"}),
    ("safetensors file", {"model": "/artifacts/w.safetensors"}),
    ("directory on the CPU", {"input": {"type": "directory", "path": "/artifacts/images"}, "resources": {"gpu": 0}}),
    ("long TTLs", {"ttlSecondsAfterFinished": 604800, "pvcTTLSecondsAfterFinished": 2592000}),
    ("class and size", {"storageClass": "longhorn", "pvcSize": "500Mi"}),
]


@pytest.mark.parametrize("spec", [v[1] for v in VALID], ids=[v[0] for v in VALID])
def test_valid(model, spec):
    model.admit(eaj(**spec))


INVALID = [
    ("unknown model", {"model": "vgg16"}, "model must be resnet50, mobilenet_v3_small or a model file"),
    ("model outside the volume", {"model": "/etc/net.pt"}, "model must be"),
    ("model escaping the volume", {"model": "/artifacts/../etc/net.pt"}, "model must be"),
    ("onnx model", {"model": "/artifacts/net.onnx"}, "model must be"),
    ("video input", {"input": {"type": "video", "path": "/artifacts/x"}}, "spec.input.type"),
    ("input outside", {"input": {"type": "image", "path": "/tmp/x.jpg"}}, "path must be in /artifacts"),
    ("input escaping", {"input": {"type": "image", "path": "/artifacts/../x.jpg"}}, "path must be in /artifacts"),
    ("input without path", {"input": {"type": "image"}}, "spec.input.path"),
    ("output not json", {"output": {"path": "/artifacts/out.txt"}}, "must be a .json file"),
    ("too many gpus", {"resources": {"gpu": 9}}, "spec.resources.gpu"),
    ("negative gpus", {"resources": {"gpu": -1}}, "spec.resources.gpu"),
    ("negative ttl", {"ttlSecondsAfterFinished": -1}, "spec.ttlSecondsAfterFinished"),
    ("pvc ttl too long", {"pvcTTLSecondsAfterFinished": 2592001}, "spec.pvcTTLSecondsAfterFinished"),
    ("volume before the pod", {"ttlSecondsAfterFinished": 600, "pvcTTLSecondsAfterFinished": 60},
     "pvcTTLSecondsAfterFinished must not be shorter than ttlSecondsAfterFinished"),
    ("bad size", {"pvcSize": "lots"}, "pvcSize must be a positive quantity"),
    ("zero size", {"pvcSize": "0"}, "pvcSize must be a positive quantity"),
    ("bad class", {"storageClass": "Long_Horn"}, "spec.storageClass"),
    ("no model", {"model": None}, "spec.model"),
]


@pytest.mark.parametrize("spec,text", [(c[1], c[2]) for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid(model, spec, text):
    obj = eaj(**spec)
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    assert text in rejected(model, obj)


def test_long_name_rejected(model):
    assert "metadata.name" in rejected(model, eaj(name="x" * 54))
    model.admit(eaj(name="x" * 53))


@pytest.mark.parametrize("change,allowed", [
    ({"ttlSecondsAfterFinished": 60}, True),
    ({"pvcTTLSecondsAfterFinished": 86400}, True),
    ({"model": "mobilenet_v3_small"}, False),
    ({"input": {"type": "image", "path": "/artifacts/other.jpg"}}, False),
    ({"resources": {"gpu": 2}}, False),
    ({"pvcSize": "2Gi"}, False),
    ({"storageClass": "longhorn"}, False),
    ({"image": "my/infer:2"}, False),
])
def test_only_the_ttls_may_change(model, change, allowed):
    old = model.admit(eaj())
    new = copy.deepcopy(old)
    new["spec"].update(change)
    if allowed:
        assert model.admit(new, old=old)["spec"].items() >= change.items()
    else:
        assert "only ttlSecondsAfterFinished and pvcTTLSecondsAfterFinished may change" in rejected(model, new, old=old)


def test_status(model):
    from kubesim.errors import ApiError

    obj = model.admit(eaj())
    obj["status"] = {"phase": "Failed", "message": "input image /artifacts/input.jpg does not exist", "exitCode": 3,
                     "finishedAt": "2026-01-01T00:00:00Z", "artifactsExpireAt": "2026-01-01T01:00:00Z",
                     "conditions": [{"type": "Failed", "status": "True", "reason": "InputNotFound", "message": "x",
                                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    model.admit(obj, old=obj, subresource="status")
    bad = copy.deepcopy(obj)
    bad["status"]["phase"] = "Exploded"
    with pytest.raises(ApiError):
        model.admit(bad, old=obj, subresource="status")


def test_api_server_accepts_the_seed_and_rejects_a_bad_model(kubesim_module):
    from kubernetes import client, config
    from kubernetes.client import ApiException

    api = config.new_client_from_config(kubesim_module.kubeconfig)
    client.ApiextensionsV1Api(api).create_custom_resource_definition(load(CRD))
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "eaj-http"}})
    custom = client.CustomObjectsApi(api)
    for doc in seed_examples():
        doc = copy.deepcopy(doc)
        doc["metadata"]["namespace"] = "eaj-http"
        created = custom.create_namespaced_custom_object(GROUP, VERSION, "eaj-http", PLURAL, doc)
        assert created["spec"] == doc["spec"] and not created.get("status")  # status is the subresource's
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, VERSION, "eaj-http", PLURAL, eaj("bad", "eaj-http", model="vgg16"))
    assert err.value.status == 422 and "model must be resnet50" in err.value.body
