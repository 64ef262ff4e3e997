"""Tiny "training" script for tests/pytorch: one all_reduce of a known tensor per rank.

    devrun train_tiny.py OUTDIR

Every rank contributes ``arange(4) + rank`` (float64); the SUM all_reduce must equal
``world * arange(4) + world * (world - 1) / 2`` exactly.  Each rank writes what it saw
(its result and the torchrun env) to OUTDIR/rank-<RANK>.json.
"""

import datetime
import json
import os
import socket
import sys

import torch
import torch.distributed as dist


def main(outdir):
    backend = os.environ.get("TORCHDEV_BACKEND", "gloo")
    dist.init_process_group(backend=backend, init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.arange(4, dtype=torch.float64) + rank
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    env = {k: os.environ.get(k) for k in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "NNODES", "NPROC_PER_NODE", "NODE_RANK", "TORCHDEV_BACKEND", "TORCHDEV_RDZV_ENDPOINT")}
    record = {"rank": rank, "world_size": world, "backend": dist.get_backend(), "result": tensor.tolist(),
              "env": env, "pid": os.getpid(), "host": socket.gethostname()}
    path = os.path.join(outdir, "rank-%d.json" % rank)
    with open(path + ".tmp", "w") as fh:
        json.dump(record, fh, sort_keys=True)
    os.replace(path + ".tmp", path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
