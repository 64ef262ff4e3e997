"""Table-driven tests of plugins/module_utils/ephemeralaccelerationjob.py: the spec's defaults
and rules, names, labels, and what the role renders (the volume's spec devctl shares, the
runner's arguments and env, resources, tolerations)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import ephemeralaccelerationjob as eaj


def _spec(**over):
    spec = {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/input.jpg"}}
    spec.update(over)
    return spec


def test_defaults_are_the_crds():
    spec = eaj.normalize({"model": "resnet50", "input": {"type": "image", "path": "/artifacts/x.jpg"},
                          "resources": {}})
    assert spec["output"] == {"path": "/artifacts/output.json"} and spec["resources"] == {"gpu": 1}
    assert spec["ttlSecondsAfterFinished"] == 0 and spec["pvcTTLSecondsAfterFinished"] == 3600
    assert spec["pvcSize"] == "1Gi" and spec["image"].startswith("pytorch/pytorch:")
    assert "storageClass" not in spec


@pytest.mark.parametrize("spec,name,field", [
    (_spec(), "job", None),
    (_spec(model="/artifacts/models/net.pt"), "job", None),
    (_spec(model="/artifacts/w.safetensors", input={"type": "directory", "path": "/artifacts/imgs"}), "job", None),
    (_spec(model="vgg16"), "job", "spec.model"),
    (_spec(model="/etc/net.pt"), "job", "spec.model"),
    (_spec(model="/artifacts/../net.pt"), "job", "spec.model"),
    (_spec(model="/artifacts/net.onnx"), "job", "spec.model"),
    (_spec(input={"type": "video", "path": "/artifacts/x"}), "job", "spec.input.type"),
    (_spec(input={"type": "image", "path": "/tmp/x.jpg"}), "job", "spec.input.path"),
    (_spec(output={"path": "/artifacts/out.txt"}), "job", "spec.output.path"),
    (_spec(resources={"gpu": 9}), "job", "spec.resources.gpu"),
    (_spec(resources={"gpu": True}), "job", "spec.resources.gpu"),
    (_spec(ttlSecondsAfterFinished=600, pvcTTLSecondsAfterFinished=60), "job", "spec.pvcTTLSecondsAfterFinished"),
    (_spec(pvcSize="lots"), "job", "spec.pvcSize"),
    (_spec(pvcSize="0"), "job", "spec.pvcSize"),
    (_spec(), "x" * 54, "metadata.name"),
])
def test_spec_problem(spec, name, field):
    problem = eaj.spec_problem(spec, name)
    if field is None:
        assert problem is None
    else:
        assert problem["reason"] == "InvalidSpec" and problem["message"].startswith(field + ":"), problem


@pytest.mark.parametrize("path,inside", [
    ("/artifacts/a.jpg", True), ("/artifacts/dir/b.png", True), ("/artifacts", False), ("/artifacts/", True),
    ("/artifacts/../a", False), ("/artifacts/x/../../a", False), ("/artifactsx/a", False), ("artifacts/a", False),
    (None, False),
])
def test_in_volume(path, inside):
    assert eaj.in_volume(path) is inside


def test_names_and_labels():
    assert (eaj.claim_name("j"), eaj.pod_name("j"), eaj.runner_name("j")) == \
        ("artifacts-j", "ephemeralaccelerationjob-j", "j-infer")
    labels = eaj.labels("j", "artifacts")
    assert labels["app.kubernetes.io/component"] == "artifacts" and labels["torchdev.io/ephemeralaccelerationjob"] == "j"
    assert eaj.selector_labels("j").items() <= labels.items()


@pytest.mark.parametrize("spec,expected", [
    (_spec(), {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
    (_spec(pvcSize="20Gi", storageClass="longhorn"),
     {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}, "storageClassName": "longhorn"}),
])
def test_claim_spec(spec, expected):
    assert eaj.claim_spec(spec) == expected


def test_runner_args_and_env():
    spec = _spec(input={"type": "directory", "path": "/artifacts/imgs"}, output={"path": "/artifacts/r/out.json"})
    assert eaj.runner_args(spec) == ["--model", "resnet50", "--input-type", "directory", "--input", "/artifacts/imgs",
                                     "--output", "/artifacts/r/out.json", "--artifacts-dir", "/artifacts"]
    env = {e["name"]: e["value"] for e in eaj.env(spec, "j", "ns")}
    assert env["PYTHONPATH"] == "/opt/torchdev/infer" and env["TORCH_HOME"] == "/tmp/.cache/torch"
    # issue 25.4: no cache a library loads pickles from is on the volume the user's upload fills
    for key in ("TORCH_HOME", "XDG_CACHE_HOME", "HF_HOME", "HOME"):
        assert not (env[key] + "/").startswith("/artifacts/"), (key, env[key])
    assert env["TORCHDEV_NAME"] == "j" and env["TORCHDEV_NAMESPACE"] == "ns"


@pytest.mark.parametrize("gpu,base,expected,tolerated", [
    (1, {"requests": {"cpu": "1"}, "limits": {"memory": "16Gi"}},
     {"limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}, True),
    (0, {"requests": {"cpu": "1"}}, {"requests": {"cpu": "1"}}, False),
    (4, None, {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}, True),
])
def test_resources_and_tolerations(gpu, base, expected, tolerated):
    spec = _spec(resources={"gpu": gpu})
    assert eaj.resources(spec, base) == expected
    assert bool(eaj.tolerations(spec)) is tolerated
