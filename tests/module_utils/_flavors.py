"""Flavors and DevServer specs several module_utils tests share."""

GPU_FLAVOR = {"metadata": {"name": "gpu"}, "spec": {"resources": {"limits": {"nvidia.com/gpu": 1}},
                                                    "gpu": {"type": "nvidia-a10g", "count": 1}}}
CPU_FLAVOR = {"metadata": {"name": "cpu"}, "spec": {"resources": {"requests": {"cpu": "2"}}, "gpu": {"count": 0}}}


def distributed_spec(nprocs=1, backend="nccl", flavor="gpu", **extra):
    """A distributed DevServer spec of 4 nodes x ``nprocs`` processes."""
    spec = {"owner": "a@b.c", "flavor": flavor, "mode": "distributed",
            "distributed": {"worldSize": 4 * nprocs, "nprocsPerNode": nprocs, "backend": backend}}
    spec.update(extra)
    return spec
