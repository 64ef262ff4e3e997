"""Table-driven tests of plugins/module_utils/R.py (no torch needed)."""

import copy

import pytest

from _flavors import CPU_FLAVOR, GPU_FLAVOR, distributed_spec

from ansible_collections.torchdev.operator.plugins.module_utils import flavor as flavors, rendezvous as R

NODE_RANK_FROM_POD_INDEX = {
    "name": "NODE_RANK",
    "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}},
}
CPU = {"resources": {"requests": {"cpu": 4, "memory": "16Gi"}}, "gpu": {"count": 0, "efa": False}}
A10G_4 = {"resources": {"limits": {"nvidia.com/gpu": 4}}, "gpu": {"type": "nvidia-a10g", "count": 4, "efa": False}}
H100_8_EFA = {"resources": {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}},
              "gpu": {"type": "nvidia-h100", "count": 8, "efa": True}}
L4_EFA = {"gpu": {"type": "nvidia-l4", "count": 4, "efa": True}}  # EFA without GPUDirect RDMA
GPU_FROM_LIMITS_ONLY = {"resources": {"limits": {"nvidia.com/gpu": "2"}}}


def devserver(world=4, nprocs=2, backend="nccl", settings=None, name="train", namespace="dev-alice", mode="distributed",
              flavor="gpu"):
    spec = {"owner": "alice@example.com", "flavor": flavor, "mode": mode}
    if mode == "distributed":
        dist = {"worldSize": world, "nprocsPerNode": nprocs, "backend": backend}
        if settings is not None:
            dist["ncclSettings"] = settings
        spec["distributed"] = dist
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
            "metadata": {"name": name, "namespace": namespace, "generation": 1}, "spec": spec}


def as_dict(env):
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in env}


HOST = "train-0.train.dev-alice.svc.cluster.local"


def test_example_exact_output():
    """The full env of a 2-node x 2-GPU nccl DevServer (the documented example)."""
    env = R.rendezvous_env(devserver(4, 2), A10G_4)
    assert env == [
        {"name": "MASTER_ADDR", "value": HOST},
        {"name": "MASTER_PORT", "value": "29500"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "NCCL_IB_DISABLE", "value": "1"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "NNODES", "value": "2"},
        NODE_RANK_FROM_POD_INDEX,
        {"name": "NPROC_PER_NODE", "value": "2"},
        {"name": "TORCHDEV_BACKEND", "value": "nccl"},
        {"name": "TORCHDEV_RDZV_ENDPOINT", "value": HOST + ":29500"},
        {"name": "WORLD_SIZE", "value": "4"},
    ]


@pytest.mark.parametrize("world, nprocs, backend, flavor, nnodes", [
    (4, 2, "nccl", A10G_4, 2),
    (2, 1, "gloo", CPU, 2),
    (1, 1, "gloo", CPU, 1),
    (16, 8, "nccl", H100_8_EFA, 2),
    (1024, 8, "nccl", H100_8_EFA, 128),
    (8, 4, "nccl", A10G_4, 2),
    (6, 2, "nccl", GPU_FROM_LIMITS_ONLY, 3),
    (3, 3, "gloo", None, 1),
])
def test_distributed_shape(world, nprocs, backend, flavor, nnodes):
    ds = devserver(world, nprocs, backend)
    env = R.rendezvous_env(ds, flavor)
    d = as_dict(env)
    assert (d["WORLD_SIZE"], d["NNODES"], d["NPROC_PER_NODE"]) == (str(world), str(nnodes), str(nprocs))
    assert int(d["NNODES"]) * int(d["NPROC_PER_NODE"]) == int(d["WORLD_SIZE"])
    assert d["MASTER_ADDR"] == HOST and d["MASTER_PORT"] == "29500"
    assert d["TORCHDEV_RDZV_ENDPOINT"] == HOST + ":29500" == R.rendezvous_endpoint(ds)
    assert d["TORCHDEV_BACKEND"] == backend
    assert NODE_RANK_FROM_POD_INDEX in env
    assert R.replicas(ds) == nnodes
    names = [item["name"] for item in env]
    assert names == sorted(names) and len(names) == len(set(names))
    for item in env:  # valid EnvVars: exactly one of value (a string) / valueFrom
        assert ("value" in item) != ("valueFrom" in item)
        assert isinstance(item.get("value", ""), str)
    # gloo gets no NCCL defaults
    if backend == "gloo":
        assert not [n for n in names if n.startswith(("NCCL_", "FI_"))]


@pytest.mark.parametrize("flavor, present, absent", [
    (A10G_4, {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"},
     ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_PROTO", "NCCL_P2P_DISABLE")),
    (H100_8_EFA, {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"},
     ("NCCL_IB_DISABLE", "NCCL_PROTO")),
    (L4_EFA, {"FI_PROVIDER": "efa", "NCCL_DEBUG": "WARN"}, ("FI_EFA_USE_DEVICE_RDMA", "NCCL_IB_DISABLE")),
    ({"gpu": {"type": "nvidia-a100-80gb", "count": 8, "efa": True}}, {"FI_EFA_USE_DEVICE_RDMA": "1"}, ("NCCL_IB_DISABLE",)),
])
def test_nccl_defaults_efa_vs_not(flavor, present, absent):
    d = as_dict(R.rendezvous_env(devserver(8, 4), flavor))
    for key, value in present.items():
        assert d[key] == value, key
    for key in absent:
        assert key not in d, key


@pytest.mark.parametrize("flavor, settings, expect", [
    (A10G_4, {"NCCL_DEBUG": "INFO"}, {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1"}),
    (A10G_4, {"NCCL_SOCKET_IFNAME": "ens5", "NCCL_IB_DISABLE": "0"}, {"NCCL_SOCKET_IFNAME": "ens5", "NCCL_IB_DISABLE": "0"}),
    (H100_8_EFA, {"NCCL_PROTO": "simple", "FI_EFA_USE_DEVICE_RDMA": "0"}, {"NCCL_PROTO": "simple", "FI_EFA_USE_DEVICE_RDMA": "0",
                                                                          "FI_PROVIDER": "efa"}),
    (A10G_4, {"NCCL_NSOCKS_PERTHREAD": 4}, {"NCCL_NSOCKS_PERTHREAD": "4"}),
])
def test_user_settings_override_defaults(flavor, settings, expect):
    ds = devserver(8, 4, settings=settings)
    before = copy.deepcopy(ds)
    d = as_dict(R.rendezvous_env(ds, flavor))
    for key, value in expect.items():
        assert d[key] == value, key
    assert ds == before, "the input must not be mutated"
    assert R.NCCL_DEFAULTS["NCCL_DEBUG"] == "WARN", "module defaults must not be mutated"


def test_user_settings_kept_with_gloo():
    d = as_dict(R.rendezvous_env(devserver(2, 1, "gloo", settings={"NCCL_DEBUG": "INFO"}), CPU))
    assert d["NCCL_DEBUG"] == "INFO" and "NCCL_IB_DISABLE" not in d


@pytest.mark.parametrize("world, nprocs, backend, flavor, reason, words", [
    (16, 8, "nccl", A10G_4, "InsufficientGPUs", ("8", "4")),
    (2, 1, "nccl", CPU, "InsufficientGPUs", ("1", "0")),
    (2, 2, "nccl", None, "InsufficientGPUs", ("2", "0")),
    (4, 4, "nccl", {"gpu": {"count": 2}}, "InsufficientGPUs", ("4", "2")),
    (6, 4, "nccl", A10G_4, "InvalidSpec", ("6", "4", "multiple")),
    (5, 2, "gloo", CPU, "InvalidSpec", ("5", "2")),
    (0, 1, "gloo", CPU, "InvalidSpec", ("worldSize",)),
    (2048, 1, "gloo", CPU, "InvalidSpec", ("worldSize",)),
    (4, 0, "gloo", CPU, "InvalidSpec", ("nprocsPerNode",)),
    (4, 32, "gloo", CPU, "InvalidSpec", ("nprocsPerNode",)),
    (4, "two", "gloo", CPU, "InvalidSpec", ("nprocsPerNode",)),
    (4, True, "gloo", CPU, "InvalidSpec", ("nprocsPerNode",)),
    (4, 2, "mpi", CPU, "InvalidSpec", ("backend",)),
])
def test_invalid(world, nprocs, backend, flavor, reason, words):
    ds = devserver(world, nprocs, backend)
    with pytest.raises(R.RendezvousError) as info:
        R.rendezvous_env(ds, flavor)
    assert isinstance(info.value, ValueError)
    assert info.value.reason == reason
    for word in words:
        assert word in str(info.value)
    errors = R.rendezvous_errors(ds, flavor)
    assert len(errors) == 1 and errors[0].startswith(reason + ": ")


def test_insufficient_gpus_message_names_both_numbers_and_flavor():
    with pytest.raises(R.RendezvousError) as info:
        R.rendezvous_env(devserver(16, 8, flavor="a10g-4"), A10G_4)
    msg = str(info.value)
    assert "nprocsPerNode (8)" in msg and "4 GPU(s)" in msg and "a10g-4" in msg


@pytest.mark.parametrize("gpus", [0, 1, 4])
def test_gloo_needs_no_gpu(gpus):
    flavor = {"gpu": {"count": gpus, "type": "nvidia-l4" if gpus else None}}
    env = R.rendezvous_env(devserver(8, 4, "gloo"), flavor)
    assert as_dict(env)["TORCHDEV_BACKEND"] == "gloo"
    assert R.rendezvous_errors(devserver(8, 4, "gloo"), flavor) == []


@pytest.mark.parametrize("spec_patch, words", [
    ({"distributed": None}, ("spec.distributed is required",)),
    ({"distributed": {"nprocsPerNode": 1}}, ("worldSize is required",)),
    ({"mode": "cluster"}, ("spec.mode",)),
    ({"distributed": {"worldSize": 2, "ncclSettings": {"CUDA_VISIBLE_DEVICES": "0"}}}, ("NCCL_ or FI_",)),
    ({"distributed": {"worldSize": 2, "ncclSettings": {"NCCL_DEBUG": ["INFO"]}}}, ("must be a string",)),
])
def test_invalid_spec_shapes(spec_patch, words):
    ds = devserver(2, 1, "gloo")
    ds["spec"].update(spec_patch)
    with pytest.raises(R.RendezvousError) as info:
        R.rendezvous_env(ds, CPU)
    assert info.value.reason == "InvalidSpec"
    for word in words:
        assert word in str(info.value)


def test_defaults_of_nprocs_and_backend():
    ds = devserver()
    ds["spec"]["distributed"] = {"worldSize": 2}
    d = as_dict(R.rendezvous_env(ds, {"gpu": {"count": 1, "type": "nvidia-l4"}}))
    assert (d["NNODES"], d["NPROC_PER_NODE"], d["TORCHDEV_BACKEND"]) == ("2", "1", "nccl")


@pytest.mark.parametrize("flavor, backend", [(CPU, "gloo"), (A10G_4, "nccl"), (None, "gloo")])
def test_standalone_minimal_env(flavor, backend):
    ds = devserver(mode="standalone")
    env = R.rendezvous_env(ds, flavor)
    assert env == [
        {"name": "MASTER_ADDR", "value": "127.0.0.1"},
        {"name": "MASTER_PORT", "value": "29500"},
        {"name": "NNODES", "value": "1"},
        {"name": "NODE_RANK", "value": "0"},
        {"name": "NPROC_PER_NODE", "value": "1"},
        {"name": "TORCHDEV_BACKEND", "value": backend},
        {"name": "TORCHDEV_RDZV_ENDPOINT", "value": "127.0.0.1:29500"},
        {"name": "WORLD_SIZE", "value": "1"},
    ]
    assert R.replicas(ds) == 1
    assert R.rendezvous_endpoint(ds) == ""
    assert R.rendezvous_errors(ds, flavor) == []
    del ds["spec"]["mode"]  # the default mode is standalone
    assert R.rendezvous_env(ds, flavor) == env


def test_spec_with_name_namespace_kwargs_and_metadata_key():
    ds = devserver(4, 2)
    full = R.rendezvous_env(ds, A10G_4)
    assert R.rendezvous_env(ds["spec"], A10G_4, name="train", namespace="dev-alice") == full
    assert R.rendezvous_env(dict(ds["spec"], metadata=ds["metadata"]), A10G_4) == full
    flavor_object = {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServerFlavor", "metadata": {"name": "gpu"},
                     "spec": A10G_4}
    assert R.rendezvous_env(ds, flavor_object) == full
    assert R.replicas(ds["spec"]) == 2
    assert R.rendezvous_endpoint(ds["spec"], name="a", namespace="b") == "a-0.a.b.svc.cluster.local:29500"
    assert R.rendezvous_endpoint(ds, cluster_domain="corp.internal.") == \
        "train-0.train.dev-alice.svc.corp.internal:29500"


def test_missing_namespace_is_invalid():
    ds = devserver(4, 2)
    with pytest.raises(R.RendezvousError) as info:
        R.rendezvous_env(ds["spec"], A10G_4, name="train")
    assert info.value.reason == "InvalidSpec" and "namespace" in str(info.value)


def test_deterministic():
    ds = devserver(8, 4, settings={"NCCL_DEBUG": "INFO", "FI_EFA_FORK_SAFE": "1", "NCCL_ALGO": "Ring"})
    shuffled = devserver(8, 4, settings={"NCCL_ALGO": "Ring", "FI_EFA_FORK_SAFE": "1", "NCCL_DEBUG": "INFO"})
    assert R.rendezvous_env(ds, H100_8_EFA) == R.rendezvous_env(shuffled, H100_8_EFA)







@pytest.mark.parametrize("spec,n", [({}, 1), ({"mode": "distributed", "distributed": {"worldSize": 8, "nprocsPerNode": 4}}, 2),
                                    ({"mode": "distributed", "distributed": {"worldSize": 4}}, 4)])
def test_replicas(spec, n):
    assert R.replicas(spec) == n


@pytest.mark.parametrize("name,flavor,spec,reason,fragment", [
    ("fits", GPU_FLAVOR, distributed_spec(1), None, None),
    ("too many processes", GPU_FLAVOR, distributed_spec(2), "InsufficientGPUs", "nprocsPerNode (2) exceeds the 1 GPU(s)"),
    ("nccl on a cpu flavor", CPU_FLAVOR, distributed_spec(1, flavor="cpu"), "InsufficientGPUs", "flavor cpu"),
    ("gloo on a cpu flavor", CPU_FLAVOR, distributed_spec(4, "gloo", flavor="cpu"), None, None),
    ("standalone on a cpu flavor", CPU_FLAVOR, {"owner": "a@b.c", "flavor": "cpu"}, None, None),
    ("missing flavor wins", None, distributed_spec(2), "FlavorNotFound", "does not exist"),
])
def test_flavor_problem_with_rendezvous(name, flavor, spec, reason, fragment):
    errors = R.rendezvous_errors(spec, flavor, name="x", namespace="ns")
    problem = flavors.flavor_problem(flavor, spec["flavor"], errors)
    if reason is None:
        assert problem is None, name
    else:
        assert problem["reason"] == reason and fragment in problem["message"], (name, problem)
        assert not problem["message"].startswith(reason)
