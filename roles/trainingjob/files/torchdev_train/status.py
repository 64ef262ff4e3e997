"""The library's status writes: rank 0 server-side-applies ITS fields of its TrainingJob's
status (progress, currentEpoch, metrics, latestCheckpoint, checkpoints, lastReportTime,
result) with the field manager torchdev-train, through the job's own identity (the
ServiceAccount <name>-trainer may only get its TrainingJob and patch its status).  The
operator's fields are another manager's: the two never touch each other's fields.

Rate-limited: at most one write per ``min_interval`` seconds; a report in between is kept
and written when the interval ends (a timer) or at ``flush()``.  Standard library only (the
training image needs no Kubernetes client)."""
from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The operator sets TORCHDEV_API_VERSION and TORCHDEV_FIELD_MANAGER from its constants
# (plugins/module_utils/constants.py API_VERSION, TRAINING_FIELD_MANAGER; module_utils/trainingjob.py
# env); these defaults are the same values (tests/module_utils/test_constants.py), for a run
# outside the operator's pods, where the collection is not.
API_VERSION = "torchdev.io/v1alpha1"
FIELD_MANAGER = "torchdev-train"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    def __init__(self, name: str, namespace: str, server: str | None = None, token: str | None = None,
                 min_interval: float = 2.0, field_manager: str | None = None):
        self.name, self.namespace = name, namespace
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        self.server = (server or os.environ.get("TORCHDEV_API_SERVER")
                       or ("https://%s:%s" % (host, os.environ.get("KUBERNETES_SERVICE_PORT", "443")) if host else ""))
        # A token given (argument, TORCHDEV_API_TOKEN) is used as is; else the token file is read
        # at each write: the kubelet renews it (rank 0's is a copy the token-relay sidecar keeps
        # fresh), and the other ranks have none (they never write).
        self.token = token or os.environ.get("TORCHDEV_API_TOKEN")
        self.token_file = None if self.token else os.path.join(SA_DIR, "token")
        self.ctx = None
        if self.server.startswith("https://"):
            ca = os.path.join(SA_DIR, "ca.crt")
            self.ctx = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)
        self.min_interval = float(min_interval)
        self.field_manager = field_manager or os.environ.get("TORCHDEV_FIELD_MANAGER") or FIELD_MANAGER
        self.api_version = os.environ.get("TORCHDEV_API_VERSION") or API_VERSION
        self.pending: dict | None = None
        self.last = 0.0
        self.writes = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.server and self.name and self.namespace)

    def update(self, fields: dict) -> None:
        """Merge ``fields`` into the next write; write now unless the last was too recent."""
        if not self.enabled:
            return
        with self._lock:
            self.pending = dict(self.pending or {}, **fields)
            wait = self.last + self.min_interval - time.monotonic()
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self.flush)
                    self._timer.daemon = True
                    self._timer.start()
                return
        self.flush()

    def flush(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            fields, self.pending = self.pending, None
            if not fields:
                return
            self.last = time.monotonic()
        self._apply(fields)

    def _apply(self, fields: dict) -> None:
        body = {"apiVersion": self.api_version, "kind": "TrainingJob",
                "metadata": {"name": self.name, "namespace": self.namespace}, "status": fields}
        url = "%s/apis/%s/namespaces/%s/trainingjobs/%s/status?fieldManager=%s" % (
            self.server.rstrip("/"), self.api_version, self.namespace, self.name, self.field_manager)
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PATCH",
                                     headers={"Content-Type": "application/apply-patch+yaml"})
        token = self.token
        if token is None and self.token_file and os.path.exists(self.token_file):
            with open(self.token_file) as f:
                token = f.read().strip()
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ctx) as resp:
                resp.read()
            self.writes += 1
        except (urllib.error.URLError, OSError) as exc:  # progress is best effort: training goes on
            self.errors.append(str(exc))
