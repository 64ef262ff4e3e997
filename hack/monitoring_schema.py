"""The Prometheus Operator's monitoring.coreos.com/v1 schemas, from Python: hack/monitoring's
validate.mjs (validators generated from the operator's CRDs, npm @kubernetes-models/
prometheus-operator pinned in hack/monitoring/package-lock.json; `make test` runs npm ci)."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

MONITORING = Path(__file__).resolve().parent / "monitoring"


class Unavailable(RuntimeError):
    """Node.js or hack/monitoring/node_modules is missing (the message names the fix)."""


def validate(objects: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """(exit status, one {kind, name, valid, errors} per object) of validate.mjs on `objects`."""
    node = shutil.which("node")
    if not node:
        raise Unavailable("node not found: the Prometheus Operator schemas run on Node.js (Debian: apt-get install "
                          "nodejs npm; .ci/run installs it)")
    if not (MONITORING / "node_modules" / "@kubernetes-models" / "prometheus-operator").is_dir():
        raise Unavailable("hack/monitoring/node_modules is missing: make test installs it "
                          "(npm ci --prefix hack/monitoring)")
    with tempfile.TemporaryDirectory(prefix="torchdev-monitoring-") as tmp:
        path = Path(tmp) / "objects.json"
        path.write_text(json.dumps(objects))
        res = subprocess.run([node, str(MONITORING / "validate.mjs"), str(path)], capture_output=True, text=True,
                             timeout=120)
    results = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    if len(results) != len(objects):
        raise RuntimeError("validate.mjs answered %d of %d objects: %s" % (len(results), len(objects),
                                                                          res.stdout + res.stderr))
    return res.returncode, results
