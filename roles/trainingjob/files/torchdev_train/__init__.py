"""torchdev_train: the TrainingJob side of the training code.

Shipped to the workers by the operator (ConfigMap <name>-train-lib on PYTHONPATH) and
importable locally.  Configuration comes from the env the operator sets (TORCHDEV_NAME,
TORCHDEV_NAMESPACE, TORCHDEV_EPOCHS, TORCHDEV_CHECKPOINT_URI / _RETENTION / _FREQUENCY,
TORCHDEV_RESUME_FROM, TORCHDEV_TARGET_ACCURACY, TORCHDEV_EARLY_STOPPING_PATIENCE,
TORCHDEV_HYPERPARAMETERS, RANK / NODE_RANK)::

    import torchdev_train as tt

    job = tt.Job.from_env()
    start, state = job.resume()                 # the newest complete checkpoint, or (1, None)
    if state: model.load_state_dict(state["model"]); opt.load_state_dict(state["optimizer"])
    for epoch in range(start, job.epochs + 1):  # epochs count from 1
        ...train one epoch...
        job.checkpoint(epoch, {"model": model.state_dict(), "optimizer": opt.state_dict()})
        if job.report(epoch, {"loss": loss, "accuracy": acc}):
            break                                # the success policy ended the training
    job.finish()

``report`` writes progress, currentEpoch and metrics to the TrainingJob's status (rank 0,
rate-limited, field manager torchdev-train) and applies the success policy; with
torch.distributed initialised every rank gets rank 0's decision.  ``checkpoint`` saves on
rank 0 every ``frequency`` epochs (and at the last), atomically, and keeps ``retention``.
"""
from __future__ import annotations

import json
import os
from typing import Any

from .checkpoint import Checkpoints, UnsafeCheckpoint, epoch_of
from .policy import SuccessPolicy
from .status import StatusWriter, now

__all__ = ["Job", "Checkpoints", "UnsafeCheckpoint", "SuccessPolicy", "StatusWriter", "EXIT_CONFIG_ERROR"]

# A worker exiting with this code fails the TrainingJob at once (no restart can fix it).
EXIT_CONFIG_ERROR = 3


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else None


def _rank() -> int:
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:  # pragma: no cover - torch is in every training image
        pass
    if os.environ.get("RANK"):
        return int(os.environ["RANK"])
    return int(os.environ.get("NODE_RANK") or 0) * int(os.environ.get("NPROC_PER_NODE") or 1) + \
        int(os.environ.get("LOCAL_RANK") or 0)


class Job:
    def __init__(self, name: str = "", namespace: str = "", epochs: int = 1, checkpoint_uri: str = "",
                 retention: int = 3, frequency: int = 1, resume_from: str = "",
                 target_accuracy: float | None = None, patience: int | None = None,
                 writer: StatusWriter | None = None, s3_client: Any = None, rank: int | None = None):
        self.name, self.namespace, self.epochs = name, namespace, int(epochs)
        self.frequency = max(int(frequency), 1)
        self.resume_from = resume_from
        self.checkpoints = Checkpoints(checkpoint_uri, retention, s3_client) if checkpoint_uri else None
        self.policy = SuccessPolicy(target_accuracy, patience)
        self.writer = writer if writer is not None else StatusWriter(name, namespace)
        self._rank = rank
        self.result: tuple[str, str] | None = None
        self.s3_client = s3_client

    @classmethod
    def from_env(cls, **overrides: Any) -> "Job":
        patience = os.environ.get("TORCHDEV_EARLY_STOPPING_PATIENCE")
        kw = dict(name=os.environ.get("TORCHDEV_NAME", ""), namespace=os.environ.get("TORCHDEV_NAMESPACE", ""),
                  epochs=int(os.environ.get("TORCHDEV_EPOCHS") or 1),
                  checkpoint_uri=os.environ.get("TORCHDEV_CHECKPOINT_URI", ""),
                  retention=int(os.environ.get("TORCHDEV_CHECKPOINT_RETENTION") or 3),
                  frequency=int(os.environ.get("TORCHDEV_CHECKPOINT_FREQUENCY") or 1),
                  resume_from=os.environ.get("TORCHDEV_RESUME_FROM", ""),
                  target_accuracy=_env_float("TORCHDEV_TARGET_ACCURACY"),
                  patience=int(patience) if patience else None)
        kw.update(overrides)
        return cls(**kw)

    @property
    def rank(self) -> int:
        return self._rank if self._rank is not None else _rank()

    @staticmethod
    def hyperparameters(path: str | None = None) -> dict:
        path = path or os.environ.get("TORCHDEV_HYPERPARAMETERS") or "/etc/torchdev/hyperparameters.json"
        with open(path) as f:
            return json.load(f)

    # -- checkpoints -------------------------------------------------------------------------
    def resume(self) -> tuple[int, Any]:
        """(next epoch, state) from the newest complete checkpoint of this job, else from
        checkpoint.resumeFrom, else (1, None).  Every rank reads it.  A checkpoint that is not
        plain data (UnsafeCheckpoint: loaded with weights_only) exits with EXIT_CONFIG_ERROR."""
        try:
            if self.checkpoints is not None:
                newest = self.checkpoints.newest()
                if newest is not None:
                    return newest + 1, self.checkpoints.load(newest)
            if self.resume_from:
                return self._resume_from()
        except UnsafeCheckpoint as exc:  # a planted file: never run it; a restart cannot fix it
            print("torchdev_train: %s" % exc)
            raise SystemExit(EXIT_CONFIG_ERROR) from None
        return 1, None

    def _resume_from(self) -> tuple[int, Any]:
        base, _, leaf = self.resume_from.rstrip("/").rpartition("/")
        epoch = epoch_of(leaf)
        if epoch is None:  # not a checkpoint this library wrote: a restart cannot fix that
            print("torchdev_train: checkpoint.resumeFrom %s is not an epoch-NNNNN checkpoint" % self.resume_from)
            raise SystemExit(EXIT_CONFIG_ERROR)
        source = Checkpoints(base, client=self.s3_client if base.startswith("s3://") else None)
        return epoch + 1, source.load(epoch)

    def checkpoint(self, epoch: int, state: Any, force: bool = False) -> str | None:
        """Rank 0 saves ``state`` after ``epoch`` every ``frequency`` epochs (always at the last
        epoch or with ``force``), rotates, and reports latestCheckpoint."""
        if self.checkpoints is None or self.rank != 0:
            return None
        if not (force or epoch % self.frequency == 0 or epoch >= self.epochs):
            return None
        where = self.checkpoints.save(epoch, state)
        self.writer.update({"latestCheckpoint": {"path": where, "epoch": int(epoch), "time": now()},
                            "checkpoints": self.checkpoints.count()})
        return where

    # -- progress ----------------------------------------------------------------------------
    def report(self, epoch: int, metrics: dict) -> bool:
        """Report ``metrics`` after ``epoch`` (counting from 1); True when the success policy
        ends the training (every rank gets rank 0's decision)."""
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        decision = self.policy.update(epoch, metrics) if self.rank == 0 else None
        stop = self._broadcast(decision is not None)
        if self.rank == 0:
            fields = {"currentEpoch": int(epoch), "metrics": metrics, "lastReportTime": now(),
                      "progress": "%d%%" % min(100, int(100 * epoch / max(self.epochs, 1)))}
            if decision:
                self.result = decision
                fields["result"] = {"reason": decision[0], "message": decision[1]}
            self.writer.update(fields)
        return stop

    def finish(self) -> None:
        """The training ended: record AllEpochsCompleted unless the policy ended it, flush."""
        if self.rank == 0:
            if self.result is None:
                self.writer.update({"result": {"reason": "AllEpochsCompleted",
                                               "message": "trained %d epochs" % self.epochs},
                                    "progress": "100%"})
            self.writer.flush()

    @staticmethod
    def _broadcast(flag: bool) -> bool:
        try:
            import torch
            import torch.distributed as dist
        except ImportError:  # pragma: no cover
            return flag
        if not (dist.is_available() and dist.is_initialized()):
            return flag
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=device)
        dist.broadcast(t, src=0)
        return bool(t.item())
