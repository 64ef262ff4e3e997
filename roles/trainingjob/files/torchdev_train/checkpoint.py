"""Checkpoints of a TrainingJob: save, rotate (retention), find the newest, load; for a
directory (a PVC) and for S3 (boto3).  Atomic: a checkpoint is complete only once its
marker exists, and the marker is written last -- a half-written checkpoint (a worker killed
mid-save) is never the newest.

Layout under the store's root (``TORCHDEV_CHECKPOINT_URI``: a directory or ``s3://bucket/prefix``):
``epoch-00012/state.pt`` and ``epoch-00012/COMPLETE``.
Directory: written to ``.epoch-00012.tmp-<pid>/`` and renamed into place (``os.replace`` of a
directory is atomic on POSIX), after fsync.  S3: ``state.pt`` is uploaded first, ``COMPLETE``
after it; objects without a ``COMPLETE`` beside them are ignored and removed by rotation.
Loading is ``torch.load(..., weights_only=True)``: tensors, numbers, strings, lists, tuples,
dicts (a model's and an optimizer's state_dict) load; anything else in the pickle (a class
with ``__reduce__``: code a planted file would run) is refused with UnsafeCheckpoint.  A
training script that saves other types registers them itself
(``torch.serialization.add_safe_globals([MyType])``) before ``Job.resume()``.
Rotation runs after each save (never fewer than ``retention`` complete checkpoints): a worker
killed between the two leaves ``retention + 1`` until the next save rotates.
"""
from __future__ import annotations

import io
import os
import pickle
import re
import shutil
from typing import Any

STATE = "state.pt"
MARKER = "COMPLETE"
_NAME = re.compile(r"^epoch-(\d{5,})$")


class UnsafeCheckpoint(ValueError):
    """A checkpoint that is not plain data (weights_only refused it): never unpickled."""


def name_of(epoch: int) -> str:
    return "epoch-%05d" % int(epoch)


def epoch_of(name: str) -> int | None:
    m = _NAME.match(name.rstrip("/").rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


class DirStore:
    """Checkpoints in a directory (the checkpoint PVC)."""

    def __init__(self, root: str):
        self.root = root.rstrip("/") or "/"

    def uri(self, name: str) -> str:
        return os.path.join(self.root, name)

    def save(self, epoch: int, data: bytes) -> str:
        os.makedirs(self.root, exist_ok=True)
        name = name_of(epoch)
        tmp = os.path.join(self.root, ".%s.tmp-%d" % (name, os.getpid()))
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for fname, payload in ((STATE, data), (MARKER, b"")):
            with open(os.path.join(tmp, fname), "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
        final = os.path.join(self.root, name)
        if os.path.exists(final):  # the same epoch saved again (after a restart): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return final

    def complete(self) -> list[int]:
        if not os.path.isdir(self.root):
            return []
        out = []
        for entry in os.listdir(self.root):
            epoch = epoch_of(entry)
            if epoch is not None and os.path.exists(os.path.join(self.root, entry, MARKER)):
                out.append(epoch)
        return sorted(out)

    def load(self, epoch: int) -> bytes:
        with open(os.path.join(self.root, name_of(epoch), STATE), "rb") as f:
            return f.read()

    def delete(self, epoch: int) -> None:
        shutil.rmtree(os.path.join(self.root, name_of(epoch)), ignore_errors=True)

    def garbage(self) -> None:
        """Leftovers of interrupted saves (temporary directories, checkpoints without marker)."""
        if not os.path.isdir(self.root):
            return
        for entry in os.listdir(self.root):
            path = os.path.join(self.root, entry)
            if entry.startswith(".epoch-") or (epoch_of(entry) is not None
                                               and not os.path.exists(os.path.join(path, MARKER))):
                shutil.rmtree(path, ignore_errors=True)


class S3Store:
    """Checkpoints under ``s3://bucket/prefix`` (boto3; endpoint and credentials from the
    environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... or the pod's identity)."""

    def __init__(self, uri: str, client: Any = None):
        if not uri.startswith("s3://"):
            raise ValueError("not an s3:// URI: %s" % uri)
        bucket, _, prefix = uri[5:].partition("/")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        if client is None:
            import boto3
            client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
        self.s3 = client

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix,) + parts if p)

    def uri(self, name: str) -> str:
        return "s3://%s/%s" % (self.bucket, self._key(name))

    def save(self, epoch: int, data: bytes) -> str:
        name = name_of(epoch)
        self.s3.put_object(Bucket=self.bucket, Key=self._key(name, STATE), Body=data)
        self.s3.put_object(Bucket=self.bucket, Key=self._key(name, MARKER), Body=b"")  # last: now complete
        return self.uri(name)

    def _keys(self) -> list[str]:
        keys, token = [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": self._key("") + "/" if self.prefix else ""}
            if token:
                kw["ContinuationToken"] = token
            page = self.s3.list_objects_v2(**kw)
            keys += [o["Key"] for o in page.get("Contents") or []]
            if not page.get("IsTruncated"):
                return keys
            token = page.get("NextContinuationToken")

    def _by_epoch(self) -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        base = len(self._key("")) + 1 if self.prefix else 0
        for key in self._keys():
            rel = key[base:]
            head, _, tail = rel.partition("/")
            epoch = epoch_of(head)
            if epoch is not None:
                out.setdefault(epoch, set()).add(tail)
        return out

    def complete(self) -> list[int]:
        return sorted(e for e, files in self._by_epoch().items() if MARKER in files and STATE in files)

    def load(self, epoch: int) -> bytes:
        return self.s3.get_object(Bucket=self.bucket, Key=self._key(name_of(epoch), STATE))["Body"].read()

    def delete(self, epoch: int) -> None:
        name = name_of(epoch)
        # the marker first: a checkpoint being deleted is never taken for complete
        for fname in (MARKER, STATE):
            self.s3.delete_object(Bucket=self.bucket, Key=self._key(name, fname))

    def garbage(self) -> None:
        for epoch, files in self._by_epoch().items():
            if MARKER not in files:
                for fname in files:
                    self.s3.delete_object(Bucket=self.bucket, Key=self._key(name_of(epoch), fname))


def store(uri: str, client: Any = None) -> DirStore | S3Store:
    """The store of ``uri``: ``s3://bucket/prefix`` or a directory."""
    if uri.startswith("s3://"):
        return S3Store(uri, client)
    if "://" in uri:
        raise ValueError("checkpoint storage %s is not supported (a directory or s3://; GCS and Azure are not)" % uri)
    return DirStore(uri)


class Checkpoints:
    """Save / rotate / find newest / load for one store, with torch serialisation."""

    def __init__(self, uri: str, retention: int = 3, client: Any = None):
        self.store = store(uri, client)
        self.retention = max(int(retention), 1)

    def save(self, epoch: int, state: Any) -> str:
        import torch

        buf = io.BytesIO()
        torch.save(state, buf)
        where = self.store.save(epoch, buf.getvalue())
        self.rotate()
        return where

    def rotate(self) -> None:
        """Keep the ``retention`` newest complete checkpoints; remove older ones and leftovers."""
        done = self.store.complete()
        for epoch in done[:-self.retention]:
            self.store.delete(epoch)
        self.store.garbage()

    def newest(self) -> int | None:
        done = self.store.complete()
        return done[-1] if done else None

    def count(self) -> int:
        return len(self.store.complete())

    def load(self, epoch: int | None = None) -> Any:
        import torch

        epoch = self.newest() if epoch is None else epoch
        if epoch is None:
            return None
        try:
            return torch.load(io.BytesIO(self.store.load(epoch)), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UnsafeCheckpoint("checkpoint %s holds more than tensors, numbers, strings, lists and dicts: refused "
                                   "to unpickle it (%s)" % (self.uri(epoch), first)) from None

    def uri(self, epoch: int) -> str:
        return self.store.uri(name_of(epoch))
