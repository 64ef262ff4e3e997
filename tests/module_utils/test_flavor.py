"""Table-driven tests of plugins/module_utils/flavor.py."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import constants, flavor


# A flavor's spec (what the role validates) and the live object (what a DevServer reads).
GPU_SPEC = {
    "resources": {"requests": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": 1},
                  "limits": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": 1}},
    "gpu": {"type": "nvidia-a10g", "count": 1},
    "shmSize": "8Gi",
}
GPU_FLAVOR = {"metadata": {"name": "gpu"}, "spec": {"resources": {"limits": {"nvidia.com/gpu": 1}},
                                                    "gpu": {"type": "nvidia-a10g", "count": 1}}}


@pytest.mark.parametrize("spec,expected", [
    (GPU_SPEC, {"requests": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "1"},
                  "limits": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": "1"}}),
    ({"resources": {"requests": {"cpu": 2}}}, {"requests": {"cpu": "2"}}),
    ({"gpu": {"type": "nvidia-h100", "count": 8}}, {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}),
    ({}, {}),
    # seed 000's gpu-large: the GPUs only in resources
    ({"resources": {"requests": {"cpu": 8, "nvidia.com/gpu": 1}, "limits": {"cpu": 16, "nvidia.com/gpu": 1}}},
     {"requests": {"cpu": "8", "nvidia.com/gpu": "1"}, "limits": {"cpu": "16", "nvidia.com/gpu": "1"}}),
    ({"gpu": {"count": 2}}, {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}),
])
def test_resources(spec, expected):
    assert flavor.resources(spec) == expected


@pytest.mark.parametrize("spec,fragment", [
    ({"resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}}, "lower than the request"),
    ({"resources": {"limits": {"nvidia.com/gpu": 2}}, "gpu": {"type": "t", "count": 1}}, "gpu.count (1)"),
    ({"resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}, "gpu": {"type": "t", "count": 2}},
     "must equal the limit"),
    ({"resources": {"limits": {"memory": "4Gi"}}, "shmSize": "8Gi"}, "exceeds the memory limit"),
    ({"resources": {"limits": {"cpu": "lots"}}}, "invalid quantity"),
    ({"resources": {"limits": {"nvidia.com/gpu": "500m"}}, "gpu": {"type": "t", "count": 0}}, "whole number"),
])
def test_flavor_errors(spec, fragment):
    errors = flavor.flavor_errors(spec)
    assert any(fragment in e for e in errors), errors
    with pytest.raises(ValueError):
        flavor.resources(spec)


@pytest.mark.parametrize("spec,count", [
    ({}, 0),
    ({"gpu": {"type": "nvidia-h100", "count": 8}}, 8),
    ({"gpu": {"count": 0}, "resources": {"limits": {"cpu": 2}}}, 0),
    ({"resources": {"limits": {"nvidia.com/gpu": 2}}}, 2),
    ({"resources": {"requests": {"nvidia.com/gpu": "4"}}}, 4),
    ({"gpu": {}, "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}}, 1),
    ({"gpu": {"count": 2}, "resources": {"limits": {"nvidia.com/gpu": 2}}}, 2),
])
def test_flavor_gpu_count(spec, count):
    assert flavor.flavor_gpu_count(spec) == count


@pytest.mark.parametrize("spec", [{"resources": {"limits": {"nvidia.com/gpu": "500m"}}},
                                  {"resources": {"limits": {"nvidia.com/gpu": "two"}}}])
def test_flavor_gpu_count_rejects_fractions(spec):
    with pytest.raises(ValueError):
        flavor.flavor_gpu_count(spec)


def test_valid_flavor_has_no_errors():
    assert flavor.flavor_errors(GPU_SPEC) == []
    assert flavor.flavor_errors({}) == []


def test_flavor_hash_ignores_informational_fields():
    base = flavor.flavor_hash(GPU_SPEC)
    assert flavor.flavor_hash(dict(GPU_SPEC, description="x", pricePerHour="9.99")) == base
    assert flavor.flavor_hash(dict(GPU_SPEC, shmSize="16Gi")) != base


def test_flavor_notices():
    dss = [
        {"metadata": {"name": "a", "namespace": "n1"}, "spec": {"flavor": "gpu"}},
        {"metadata": {"name": "b", "namespace": "n2", "annotations": {constants.FLAVOR_HASH_ANNOTATION: "h"}}, "spec": {"flavor": "gpu"}},
        {"metadata": {"name": "c", "namespace": "n3"}, "spec": {"flavor": "cpu"}},
        {"metadata": {"name": "d", "namespace": "n4", "deletionTimestamp": "t"}, "spec": {"flavor": "gpu"}},
        # created since the flavor's last change: reconciled with this spec already
        {"metadata": {"name": "e", "namespace": "n5"}, "spec": {"flavor": "gpu"}, "status": {"flavorSpecHash": "h"}},
    ]
    assert [d["metadata"]["name"] for d in flavor.flavor_users(dss, "gpu")] == ["a", "b", "e"]
    assert flavor.flavor_notices(dss, "gpu", "h") == [{"apiVersion": constants.API_VERSION, "kind": "DevServer", "metadata": {
        "name": "a", "namespace": "n1", "annotations": {constants.FLAVOR_HASH_ANNOTATION: "h"}}}]
    # the flavor changes: every user not reconciled with the new spec is told, "e" included
    assert [n["metadata"]["name"] for n in flavor.flavor_notices(dss, "gpu", "h2")] == ["a", "b", "e"]
    # edited into an invalid spec h2 and back to h: the server told of h2 kept its status of h
    # (a rejected spec leaves the running server's status as it was) and is told again
    back = [{"metadata": {"name": "f", "namespace": "n6", "annotations": {constants.FLAVOR_HASH_ANNOTATION: "h2"}},
             "spec": {"flavor": "gpu"}, "status": {"flavorSpecHash": "h"}}]
    assert [n["metadata"]["name"] for n in flavor.flavor_notices(back, "gpu", "h")] == ["f"]


def test_flavor_problem_missing_flavor_names_the_field():
    assert flavor.flavor_problem(None, "gone", []) == {
        "reason": "FlavorNotFound",
        "message": "spec.flavor: DevServerFlavor gone does not exist (kubectl get devserverflavors lists the available ones)"}


def test_flavor_problem_unknown_reason_is_invalid_spec():
    assert flavor.flavor_problem(GPU_FLAVOR, "gpu", ["oops"]) == {"reason": "InvalidSpec", "message": "oops"}
    assert flavor.flavor_problem(GPU_FLAVOR, "gpu", ["Weird: x"])["reason"] == "InvalidSpec"
