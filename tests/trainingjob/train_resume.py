"""A tiny deterministic distributed training run with torchdev_train (tests/trainingjob).

    python train_resume.py OUTDIR

gloo, one process per "worker" (RANK = NODE_RANK, the completion index), a linear model
trained with SGD + momentum on a fixed synthetic regression; gradients are all-reduced by
hand (no DDP bucketing: bit-identical runs).  The library resumes from the newest complete
checkpoint, checkpoints every epoch (rotation per TORCHDEV_CHECKPOINT_RETENTION) and reports.
Rank 0 writes OUTDIR/final.pt (the weights) and OUTDIR/resumed-<attempt>.json (where it started);
every rank appends the epochs it trained to OUTDIR/epochs-<rank>.log.  TRAIN_EPOCH_SLEEP
slows the epochs down so that a test can kill the workers mid-run; with TRAIN_GATE set, no rank
starts the last epoch before that file exists (a run the test kills never finishes first, however
slowly the test itself is scheduled).
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import torchdev_train as tt


def data(epoch, rank, world):
    g = torch.Generator().manual_seed(1000 * epoch + rank)
    x = torch.randn(64, 4, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]], dtype=torch.float64) + 0.25
    return x, y


def main(outdir):
    os.environ.setdefault("RANK", os.environ["NODE_RANK"])
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    job = tt.Job.from_env()
    start, state = job.resume()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    if rank == 0:
        with open(os.path.join(outdir, "resumed-%s.json" % os.environ.get("TORCHDEV_ATTEMPT", "0")), "w") as f:
            json.dump({"start": start}, f)
    sleep = float(os.environ.get("TRAIN_EPOCH_SLEEP", "0"))
    gate = os.environ.get("TRAIN_GATE")
    for epoch in range(start, job.epochs + 1):
        while gate and epoch == job.epochs and not os.path.exists(gate):
            time.sleep(0.05)
        x, y = data(epoch, rank, world)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        with open(os.path.join(outdir, "epochs-%d.log" % rank), "a") as f:
            f.write("%d\n" % epoch)
        job.checkpoint(epoch, {"model": model.state_dict(), "optimizer": opt.state_dict()})
        dist.barrier()  # every rank waits for the checkpoint of this epoch
        if job.report(epoch, {"loss": float(total) / world}):
            break
        time.sleep(sleep)
    job.finish()
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(outdir, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
