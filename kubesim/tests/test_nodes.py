"""The --nodes spec grammar, Node objects and quantities."""
from __future__ import annotations

from decimal import Decimal

import pytest

from kubesim.nodes import DEFAULT_NODES_SPEC, parse_nodes
from kubesim.quantity import format_quantity, parse_quantity


def _by_name(nodes):
    return {n["metadata"]["name"]: n for n in nodes}


def test_default_pool():
    nodes = _by_name(parse_nodes(DEFAULT_NODES_SPEC))
    assert sorted(nodes) == ["cpu-0", "cpu-1", "gpu-0", "gpu-1"]
    cpu, gpu = nodes["cpu-0"], nodes["gpu-1"]
    assert cpu["status"]["allocatable"]["cpu"] == "16"
    assert cpu["status"]["allocatable"]["memory"] == "64Gi"
    assert "nvidia.com/gpu" not in cpu["status"]["allocatable"]
    assert "taints" not in cpu["spec"]
    assert "nvidia.com/gpu.present" not in cpu["metadata"]["labels"]
    assert gpu["status"]["capacity"] == {"cpu": "48", "memory": "192Gi", "pods": "110",
                                         "ephemeral-storage": "100Gi", "nvidia.com/gpu": "4"}
    assert gpu["status"]["allocatable"] == gpu["status"]["capacity"]
    labels = gpu["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "gpu-1"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["kubesim.io/pool"] == "gpu"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["node.kubernetes.io/instance-type"] == "g5.12xlarge"
    assert labels["torchdev.io/gpu-type"] == "nvidia-a10g"
    assert gpu["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present",
                                      "effect": "NoSchedule"}]
    ready = [c for c in gpu["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    ips = [a["address"] for n in nodes.values() for a in n["status"]["addresses"]
           if a["type"] == "InternalIP"]
    assert len(set(ips)) == 4 and all(ip.startswith("10.0.") for ip in ips)
    assert gpu["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.")


@pytest.mark.parametrize("spec, expected", [
    ("", []),
    ("  ;  ", []),
    ("a:{}", ["a-0"]),
    ("a:3x{cpu:8}", ["a-0", "a-1", "a-2"]),
    ("a:2x", ["a-0", "a-1"]),
    ("a:0x{cpu:8};b:1x{}", ["b-0"]),
    ("a:1x{cpu:8};b:2x{cpu:4}", ["a-0", "b-0", "b-1"]),
    ("a:1x{cpu:8} b:1x{cpu:4}", ["a-0", "b-0"]),
    ("a:1x{cpu:8}\n b:1x{cpu:4};", ["a-0", "b-0"]),
    ("a : 2 x { cpu : 8 , memory : 32Gi }", ["a-0", "a-1"]),
])
def test_node_names(spec, expected):
    assert [n["metadata"]["name"] for n in parse_nodes(spec)] == expected


@pytest.mark.parametrize("spec, path, value", [
    ("a:{}", ("status", "capacity", "pods"), "110"),
    ("a:{}", ("status", "capacity", "ephemeral-storage"), "100Gi"),
    ("a:{pods:250}", ("status", "allocatable", "pods"), "250"),
    ("a:{cpu:500m}", ("status", "allocatable", "cpu"), "500m"),
    ("a:{vpc.amazonaws.com/efa:32}", ("status", "capacity", "vpc.amazonaws.com/efa"), "32"),
    ("a:{example.com/foo:2}", ("status", "capacity", "example.com/foo"), "2"),
    ("a:{hugepages-2Mi:1Gi}", ("status", "capacity", "hugepages-2Mi"), "1Gi"),
    ("a:{nvidia.com/gpu:8}", ("metadata", "labels", "nvidia.com/gpu.present"), "true"),
    ("a:{labels:{team:ml,tier:\"gold\"}}", ("metadata", "labels", "tier"), "gold"),
    ("a:{labels:{x.io/y:''}}", ("metadata", "labels", "x.io/y"), ""),
    ("a:{annotations:{note:'hello world'}}", ("metadata", "annotations", "note"), "hello world"),
    ("a:{unschedulable:true}", ("spec", "unschedulable"), True),
])
def test_node_fields(spec, path, value):
    node = parse_nodes(spec)[0]
    for p in path:
        node = node[p]
    assert node == value


@pytest.mark.parametrize("taints, expected", [
    ("[a=b:NoSchedule]", [{"key": "a", "value": "b", "effect": "NoSchedule"}]),
    ("[dedicated:NoExecute]", [{"key": "dedicated", "effect": "NoExecute"}]),
    ("[x.io/k=v:PreferNoSchedule, y:NoSchedule]",
     [{"key": "x.io/k", "value": "v", "effect": "PreferNoSchedule"},
      {"key": "y", "effect": "NoSchedule"}]),
    ("[{key:a,value:b,effect:NoSchedule}]", [{"key": "a", "value": "b", "effect": "NoSchedule"}]),
    ("a=b:NoSchedule", [{"key": "a", "value": "b", "effect": "NoSchedule"}]),
])
def test_taints(taints, expected):
    assert parse_nodes(f"p:{{taints:{taints}}}")[0]["spec"]["taints"] == expected


def test_unschedulable_adds_taint():
    node = parse_nodes("p:{unschedulable:true}")[0]
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in node["spec"]["taints"]


@pytest.mark.parametrize("spec, message", [
    ("gpu", "expected ':'"),
    ("gpu:", "expected COUNTx"),
    ("gpu: ;b:{}", "expected COUNTx"),
    ("GPU:{}", "invalid pool name"),
    ("a_b:{}", "invalid pool name"),
    ("a:x{}", "expected COUNTx"),
    ("a:2x{cpu:abc}", "invalid quantity 'abc' for cpu"),
    ("a:{cpu:-1}", "invalid quantity"),
    ("a:{nvidia.com/gpu:1.5}", "whole number"),
    ("a:{foo:1}", "unknown key 'foo'"),
    ("a:{cpu:1,cpu:2}", "duplicate key"),
    ("a:{cpu:1", "unterminated"),
    ("a:{taints:[x:NoSchedule}", "expected ',' or ']'"),
    ("a:{taints:[a=b]}", "needs an effect"),
    ("a:{taints:[a=b:Sometimes]}", "invalid taint effect"),
    ("a:{taints:[=b:NoSchedule]}", "invalid taint key"),
    ("a:{labels:[x]}", "labels must be a map"),
    ("a:{labels:{'bad key':x}}", "invalid label key"),
    ("a:{labels:{k:'bad value'}}", "invalid label value"),
    ("a:{labels:{k:{x:y}}}", "must be a string"),
    ("a:{cpu:{x:1}}", "must be a quantity"),
    ("a:{unschedulable:maybe}", "true or false"),
    ("a:{};a:{}", "duplicate node pool 'a'"),
    ("a:{}b:{}", "expected ';' or whitespace"),
    ("a:{labels:{k:\"v}}", "unterminated quoted string"),
    ("a:20000x{}", "too many nodes"),
])
def test_bad_specs(spec, message):
    with pytest.raises(ValueError) as info:
        parse_nodes(spec)
    if message:
        assert message in str(info.value)


def test_ips_unique_across_pools():
    nodes = parse_nodes("a:300x{};b:300x{}")
    ips = {a["address"] for n in nodes for a in n["status"]["addresses"] if a["type"] == "InternalIP"}
    assert len(ips) == 600


@pytest.mark.parametrize("value, resource, text", [
    (Decimal("0.5"), "cpu", "500m"),
    (Decimal(4), "cpu", "4"),
    (Decimal(2 ** 30), "memory", "1Gi"),
    (Decimal(1536 * 2 ** 20), "storage", "1536Mi"),
    (Decimal(1000), "memory", "1000"),
])
def test_format_quantity(value, resource, text):
    assert format_quantity(value, resource) == text
    assert parse_quantity(text) == value
