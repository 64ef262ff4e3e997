"""Every Kueue object torchdev renders or ships, validated against Kueue's real CRDs
(v0.19.2, KUEUE_CRDS_DIR): OpenAPI schema, bounds and CEL rules through kubesim's
admission path, and nothing pruned (an unknown field would be dropped silently).

* the ResourceFlavor of each sample DevServerFlavor (and of edge cases), rendered by the
  devserverflavor role's real template and filters in ONE ansible-playbook run;
* the WorkloadPriorityClasses of config/kueue (and that kustomize builds them).
The StatefulSet's queue labels are covered by tests/test_render.py; the DevUser role's
LocalQueue / ClusterQueue by its own tests.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _support import tool
import yaml

from kubesim import kueue as kq

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "config" / "samples"
TEMPLATE = ROOT / "roles" / "devserverflavor" / "templates" / "resourceflavor" / "flavor.yaml.j2"




def _model(kind):
    from kubesim.validation import CRDModel

    crd = next(c for c in kq.load_crds() if c["spec"]["names"]["kind"] == kind)
    return CRDModel(copy.deepcopy(crd)).version("v1beta2")  # what torchdev renders


def admit(obj):
    """The object as the apiserver stores it (defaults applied) or ApiError; no field pruned."""
    from ansible_collections.torchdev.operator.plugins.module_utils.plan import is_subset

    out = _model(obj["kind"]).admit(copy.deepcopy(obj))
    assert is_subset(obj, out), (obj, out)
    return out


FLAVORS = {p.stem.rsplit("_", 1)[-1]: yaml.safe_load(p.read_text())
           for p in sorted(SAMPLES.glob("torchdev_v1alpha1_devserverflavor_*.yaml"))}
EDGE = {
    "bare": {"resources": {"requests": {"cpu": "1"}}},
    "equal-toleration": {"nodeSelector": {"pool": "a"},
                         "tolerations": [{"key": "pool", "operator": "Equal", "value": "a", "effect": "NoExecute",
                                          "tolerationSeconds": 60},
                                         {"operator": "Exists"}]},
    "eight-labels": {"nodeSelector": {"k%d" % i: "v" for i in range(8)}},
}
for _name, _spec in EDGE.items():
    FLAVORS[_name] = {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServerFlavor",
                      "metadata": {"name": _name}, "spec": _spec}


@pytest.fixture(scope="module")
def resource_flavors(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rf")
    hosts = {}
    for name, flavor in FLAVORS.items():
        obj = dict(flavor, metadata=dict(flavor["metadata"], uid="uid-" + name, generation=1))
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "ansible_operator_meta": {"name": name}, "_torchdev_io_devserverflavor": obj,
                       "_torchdev_io_devserverflavor_spec": obj["spec"]}
    (tmp / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts}}))
    (tmp / "render.yml").write_text(yaml.safe_dump([{
        "name": "Render ResourceFlavors", "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "Validate", "ansible.builtin.include_role": {"name": "torchdev.operator.devserverflavor",
                                                                   "tasks_from": "validate.yml", "public": True}},
            {"name": "Dump", "ansible.builtin.copy": {
                "content": "{{ lookup('ansible.builtin.template', '%s') | from_yaml | to_json }}" % TEMPLATE,
                "dest": str(tmp) + "/{{ inventory_hostname }}.json", "mode": "0644"}},
        ],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORKS="8", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp / "inventory.json"),
                           str(tmp / "render.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return {name: json.loads((tmp / ("%s.json" % name)).read_text()) for name in FLAVORS}


@pytest.mark.parametrize("name", sorted(FLAVORS))
def test_resource_flavor_is_valid_kueue(resource_flavors, name):
    rf = resource_flavors[name]
    admit(rf)
    spec = FLAVORS[name]["spec"]
    assert rf["apiVersion"] == "kueue.x-k8s.io/v1beta2" and rf["kind"] == "ResourceFlavor"
    assert rf["metadata"]["name"] == name
    assert rf["metadata"]["ownerReferences"] == [{
        "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServerFlavor", "name": name, "uid": "uid-" + name,
        "controller": True, "blockOwnerDeletion": True}]
    assert rf["spec"].get("nodeLabels", {}) == spec.get("nodeSelector", {})
    assert "tolerations" not in rf["spec"]  # the pods carry them (test_a_cpu_pod_cannot_take_a_gpu_flavor)


def test_resource_flavor_taints(resource_flavors):
    assert resource_flavors["gpu-a10g-1"]["spec"]["nodeTaints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert resource_flavors["gpu-h100-8"]["spec"]["nodeTaints"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}, {"key": "vpc.amazonaws.com/efa", "effect": "NoSchedule"}]
    assert resource_flavors["equal-toleration"]["spec"]["nodeTaints"] == [
        {"key": "pool", "value": "a", "effect": "NoExecute"}]
    assert resource_flavors["bare"]["spec"] == {}
    assert "nodeTaints" not in resource_flavors["cpu-small"]["spec"]


def test_a_cpu_pod_cannot_take_a_gpu_flavor(resource_flavors):
    """Kueue adds a ResourceFlavor's own tolerations to a pod's before it checks the flavor's
    nodeTaints (kubesim.kueue.flavor_mismatch, as v0.19.2's flavor assigner): a ResourceFlavor
    carrying its DevServerFlavor's tolerations took any pod, so on the real Kueue a cpu-small
    workload whose cpu-small quota was full was admitted on gpu-a10g-1's quota, given its node
    labels and tolerations, and could never be scheduled (tests/real/test_kueue_real.py). The
    ResourceFlavor carries none: the pods of a GPU flavor tolerate its taints themselves."""
    cpu_pod = {"nodeSelector": FLAVORS["cpu-small"]["spec"]["nodeSelector"]}
    for name in ("gpu-a10g-1", "gpu-h100-2", "gpu-h100-8"):
        assert "untolerated taint" in (kq.flavor_mismatch(resource_flavors[name], cpu_pod) or ""), name
        gpu_pod = {"nodeSelector": FLAVORS[name]["spec"]["nodeSelector"],
                   "tolerations": FLAVORS[name]["spec"]["tolerations"]}
        assert kq.flavor_mismatch(resource_flavors[name], gpu_pod) is None, name
    assert kq.flavor_mismatch(resource_flavors["cpu-small"], cpu_pod) is None


def test_too_many_labels_are_rejected_by_kueue_and_reported_by_us(resource_flavors):
    """The role reports a flavor beyond the ResourceFlavor bounds instead of applying it:
    Kueue's CRD would reject it (this is the bound torchdev_resource_flavor_errors mirrors)."""
    from kubesim.errors import ApiError

    rf = copy.deepcopy(resource_flavors["eight-labels"])
    rf["spec"]["nodeLabels"]["k8"] = "v"
    with pytest.raises(ApiError) as err:
        _model("ResourceFlavor").admit(rf)
    assert "spec.nodeLabels" in err.value.message
    from ansible_collections.torchdev.operator.plugins.module_utils import kueue

    assert kueue.resource_flavor_errors({"nodeSelector": rf["spec"]["nodeLabels"]})


def _priority_classes():
    docs = list(yaml.safe_load_all((ROOT / "config" / "kueue" / "workloadpriorityclasses.yaml").read_text()))
    return {d["metadata"]["name"]: d for d in docs if d}


def test_workload_priority_classes_are_valid_kueue():
    classes = _priority_classes()
    assert {name: wpc["value"] for name, wpc in classes.items()} == {
        "torchdev-low": 100, "torchdev-normal": 1000, "torchdev-high": 10000}
    for wpc in classes.values():
        admit(wpc)


def test_kueue_kustomization_builds():
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "config" / "kueue")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    built = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out.stdout) if d}
    assert set(built) == set(_priority_classes())
    for wpc in built.values():
        assert wpc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "torchdev"
        admit(wpc)


def test_kueue_is_not_a_prerequisite_of_config_default():
    """Kueue is optional: `make deploy` (config/default) must not need its CRDs."""
    default = yaml.safe_load((ROOT / "config" / "default" / "kustomization.yaml").read_text())
    assert not any("kueue" in str(r) for r in default.get("resources", []))
