"""The real tier of the end-to-end tests (issue 26.4): the same test modules as on kubesim, run
against the real control plane (hack/cluster: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler, kwok), the real Kueue (hack/kueue) and the real ansible-operator
(hack/ansible_operator: the image's Python, the operator's own ServiceAccount and config/rbac).

`TORCHDEV_E2E_TIER=real` makes tests/_cluster.py's fixtures come from here (`make test-real`
runs the modules of REAL_E2E so). What the modules read of kubesim and of the local runtime has
a counterpart here, so that a test asks the same question of both tiers:

* ``sim`` (`RealSim`): the admin kubeconfig; ``requests``/``writes``/``metrics``/``reset_metrics``
  from kube-apiserver's audit log (hack/cluster's AUDIT_POLICY), restricted to what kubesim's
  request log holds: the requests of the operator and of the test's clients, not those of the
  control plane's own controllers, kwok or Kueue; ``deletions``/``deletion_requests`` for the
  data-safety check (tests/_data_safety.py) from the audit log's deletions, the garbage collector
  and the namespace controller named as kubesim names them.
* ``runtime`` (`RealRuntime`): ``history`` from ansible-runner's artifacts of each run (status,
  rc), ``counters`` from ansible-operator's metrics (controller_runtime_reconcile_total),
  ``wait_idle`` from its work queues' depth and active workers, ``enqueue`` by what makes
  ansible-operator reconcile an object (an annotation for a watch with watchAnnotationsChanges).
* The cluster itself is hack/cluster/stack.py's `Stack` (what `make demo CLUSTER=real` starts
  too): the control plane, kubesim's storage classes with a provisioner of hostPath volumes,
  torchdev's CRDs and sample flavors, and Kueue for the modules that ask for it.

One control plane (with its operator) serves the modules that ask for the same nodes and Kueue
setting; a module asking for others gets a fresh one.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import shutil
import tempfile
import threading
import time
import urllib.request
from typing import Any, Callable

from _e2e_helpers import GROUP, VERSION

OPERATOR_USER = "system:serviceaccount:torchdev-system:torchdev-controller-manager"
# kube-controller-manager's controllers (--use-service-account-credentials) as kubesim names them
CONTROLLERS = {"system:serviceaccount:kube-system:generic-garbage-collector": "garbagecollector",
               "system:serviceaccount:kube-system:namespace-controller": "namespace"}
# Who is the cluster's machinery, not the operator or the test (kubesim's request log holds none of it).
MACHINERY_AGENTS = ("kwok/", "kueue/", "kube-controller-manager/", "kube-scheduler/", "kube-apiserver/")
MACHINERY_USERS = ("system:serviceaccount:kube-system:", "system:kube-", "system:apiserver",
                   "system:serviceaccount:kueue-system:")
# The requests of the tests' `enqueue` (not the test's, not the operator's: kubesim's enqueue writes nothing).
ENQUEUE_AGENT = "torchdev-e2e-enqueue/1.0"

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# The kinds whose watch sets watchAnnotationsChanges (watches.yaml): an annotation enqueues them.
ANNOTATION_WATCHES = {"DevServer", "DevServerFlavor"}
PLURALS = {"DevServer": "devservers", "DevServerFlavor": "devserverflavors", "DevUser": "devusers",
           "TrainingJob": "trainingjobs", "EphemeralAccelerationJob": "ephemeralaccelerationjobs"}
CLUSTER_SCOPED = {"DevServerFlavor", "DevUser"}


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2,
             message: str = "condition") -> Any:
    from kubesim.testing import wait_for as poll

    return poll(predicate, timeout, max(interval, 0.1), message)


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _resource_key(ref: dict) -> str:
    """kubesim's resource key: plural, `.group` when not core, `/subresource`."""
    key = ref.get("resource", "") + ("." + ref["apiGroup"] if ref.get("apiGroup") else "")
    return key + ("/" + ref["subresource"] if ref.get("subresource") else "")


class AuditLog:
    """kube-apiserver's audit log, read incrementally (its lines are whole once a request is answered:
    --audit-log-mode=blocking)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self._offset = 0
        self._events: list[dict] = []
        self._lock = threading.Lock()

    def events(self) -> list[dict]:
        with self._lock:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return list(self._events)
            end = chunk.rfind(b"\n") + 1
            self._offset += end
            for line in chunk[:end].splitlines():
                if line.strip():
                    self._events.append(json.loads(line))
            return list(self._events)


class RealSim:
    """What the e2e modules ask of kubesim's `KubeSim`, answered by the real control plane."""

    def __init__(self, cluster, kueue=None):
        self.cluster = cluster
        self.kueue = kueue
        self.kubeconfig = str(cluster.kubeconfig)
        self.audit = AuditLog(cluster.audit_log)
        self._since = 0.0
        self.api = _Api(self)

    @property
    def url(self) -> str:
        return self.cluster.server

    def wait_for(self, predicate, timeout: float = 30.0, interval: float = 0.2, message: str = "condition"):
        return wait_for(predicate, timeout, interval, message)

    def call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def service_account_files(self, namespace: str, service_account: str, directory) -> None:
        """What the kubelet mounts for a projected ServiceAccount token (`token`, `ca.crt`):
        a TokenRequest for that ServiceAccount and the cluster's CA, so code that runs in a
        pod (the training library's status writes) is checked with the pod's own RBAC."""
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.cluster.service_account_token(namespace, service_account, 3600))
        shutil.copyfile(self.cluster.pki / "ca.crt", directory / "ca.crt")

    # -- the request log ---------------------------------------------------------------------
    @staticmethod
    def _ours(e: dict) -> bool:
        user = (e.get("user") or {}).get("username", "")
        agent = e.get("userAgent", "")
        if "objectRef" not in e:  # discovery, /version: kubesim's log holds API requests only
            return False
        if user == OPERATOR_USER:
            return True
        return not (agent.startswith(MACHINERY_AGENTS) or user.startswith(MACHINERY_USERS)
                    or agent.startswith(ENQUEUE_AGENT))

    def _entries(self) -> list[dict]:
        out = []
        for e in self.audit.events():
            if not self._ours(e) or _epoch(e["stageTimestamp"]) < self._since:
                continue
            ref = e["objectRef"]
            out.append({"time": _epoch(e["stageTimestamp"]), "verb": e["verb"], "resource": _resource_key(ref),
                        "code": (e.get("responseStatus") or {}).get("code", 0),
                        "path": e["requestURI"].split("?", 1)[0], "user_agent": e.get("userAgent", ""),
                        "user": (e.get("user") or {}).get("username", ""), **(
                            {"noop": False} if e["verb"] in WRITE_VERBS else {})})
        return out

    def machinery_writes(self, namespace: str) -> list[dict]:
        """The writes of the cluster's own machinery (controllers, kwok, Kueue; not Events) to
        objects in `namespace` since `reset_metrics`: what an operator may rightly follow."""
        out = []
        for e in self.audit.events():
            ref = e.get("objectRef") or {}
            if (e.get("verb") not in WRITE_VERBS or ref.get("namespace") != namespace or self._ours(e)
                    or ref.get("resource") == "events" or e.get("userAgent", "").startswith(ENQUEUE_AGENT)
                    or _epoch(e["stageTimestamp"]) < self._since):
                continue
            out.append({"verb": e["verb"], "resource": _resource_key(ref), "name": ref.get("name", ""),
                        "user_agent": e.get("userAgent", "")})
        return out

    def requests(self, limit: int = 1000) -> list[dict]:
        return self._entries()[-limit:]

    def reset_metrics(self) -> None:
        self.audit.events()
        self._since = time.time()

    def writes(self, resource: str | None = None) -> int:
        return len([r for r in self._entries() if r["verb"] in WRITE_VERBS and (
            resource is None or r["resource"] == resource or r["resource"].split("/")[0] == resource)])

    def metrics(self) -> dict:
        from collections import Counter

        entries = self._entries()
        counts = Counter((r["verb"], r["resource"], r["code"]) for r in entries)
        return {"requests": {f"{v} {r} {c}": n for (v, r, c), n in sorted(counts.items())},
                "by_verb": dict(Counter(r["verb"] for r in entries)), "total": len(entries),
                "writes": len([r for r in entries if r["verb"] in WRITE_VERBS])}

    # -- deletions (tests/_data_safety.py) ----------------------------------------------------
    def _deletes(self) -> list[dict]:
        out = []
        for e in self.audit.events():
            if e.get("verb") != "delete" or "objectRef" not in e:
                continue
            code = (e.get("responseStatus") or {}).get("code", 0)
            obj = e.get("responseObject") or {}
            if code >= 300:
                continue
            if obj.get("kind") == "Status":  # deleted at once: the Status names it
                details = obj.get("details") or {}
                obj = {"metadata": {"name": details.get("name", ""), "uid": details.get("uid", "")}}
            ref, user = e["objectRef"], (e.get("user") or {}).get("username", "")
            origin = ({"via": "controller", "controller": CONTROLLERS[user]} if user in CONTROLLERS else
                      {"via": "request", "verb": "delete", "path": e["requestURI"],
                       "user_agent": e.get("userAgent", "")})
            meta = obj.get("metadata") or {}
            out.append({"time": _epoch(e["stageTimestamp"]), "requested_at": _epoch(e["stageTimestamp"]),
                        "resource": _resource_key(ref), "namespace": ref.get("namespace", ""),
                        "name": ref.get("name", ""), "uid": meta.get("uid", ""),
                        "labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {}),
                        "ownerReferences": list(meta.get("ownerReferences") or []),
                        "requested_by": origin, "removed_by": origin, "object": obj})
        return out

    def deletions(self, resource: str | None = None) -> list[dict]:
        return [r for r in self._deletes() if resource is None or r["resource"] == resource]

    def deletion_requests(self, resource: str | None = None) -> list[dict]:
        return self.deletions(resource)


class _Api:
    """`sim.api.get(resource_key, namespace, name)` (tests/_data_safety.py) on the real API."""

    def __init__(self, sim: RealSim):
        self.sim = sim

    def get(self, resource: str, namespace: str, name: str) -> dict:
        from kubernetes import client, config

        plural, _, group = resource.partition(".")
        api = client.CustomObjectsApi(config.new_client_from_config(self.sim.kubeconfig))
        return api.get_namespaced_custom_object(group, VERSION, namespace, plural, name)


class RealRuntime:
    """What the e2e modules ask of torchdev_runtime's `Runtime`, answered by the real ansible-operator."""

    def __init__(self, operator, sim: RealSim):
        self.operator = operator
        self.sim = sim
        self.runner_dir = pathlib.Path("/tmp/ansible-operator/runner") / GROUP / VERSION
        self._seen: dict[str, Any] = {}
        # ansible-operator's runner directory outlives it (a fixed /tmp path): runs before this one started are not its
        self._since = time.time()
        from kubernetes import client, config

        api = config.new_client_from_config(sim.kubeconfig)
        api.user_agent = ENQUEUE_AGENT
        self._custom = client.CustomObjectsApi(api)
        self._n = 0

    # -- metrics -------------------------------------------------------------------------------
    def _metrics(self) -> dict[tuple[str, tuple], float]:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.operator.metrics_port, timeout=5) as r:
            text = r.read().decode()
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    @staticmethod
    def _controller(kind: str) -> str:
        return kind.lower() + "-controller"

    def counters(self, kind: str | None = None) -> dict:
        m = self._metrics()
        out = {}
        for k in PLURALS:
            c = self._controller(k)
            res = {dict(lab).get("result"): v for (name, lab), v in m.items()
                   if name == "controller_runtime_reconcile_total" and dict(lab).get("controller") == c}
            errors = sum(v for (name, lab), v in m.items()
                         if name == "controller_runtime_reconcile_errors_total" and dict(lab).get("controller") == c)
            runs = [r for r in self.history(k)]
            out[k] = {"started": int(sum(res.values())), "succeeded": len([r for r in runs if r.ok]),
                      "failed": len([r for r in runs if not r.ok]), "errors": int(errors),
                      "ansible_runs": len(runs), "finalizer_runs": len([r for r in runs if r.finalizer_run]),
                      "in_flight": int(m.get(("controller_runtime_active_workers", (("controller", c),)), 0)),
                      "queued": int(m.get(("workqueue_depth", (("controller", c), ("name", c))), 0))}
        return out[kind] if kind else out

    def is_idle(self) -> bool:
        m = self._metrics()
        busy = sum(v for (name, _), v in m.items() if name in ("controller_runtime_active_workers", "workqueue_depth"))
        return busy == 0

    def wait_idle(self, timeout: float = 60.0, settle: float = 1.0) -> bool:
        end = time.monotonic() + timeout
        since = None
        while time.monotonic() < end:
            if self.is_idle():
                since = since or time.monotonic()
                if time.monotonic() - since >= settle:
                    return True
            else:
                since = None
            time.sleep(0.2)
        return False

    # -- runs ----------------------------------------------------------------------------------
    def history(self, kind: str | None = None) -> list:
        """Every finished run of ansible-runner (its artifacts: status, rc), oldest first; runs are
        remembered, so ansible-runner's rotation of old artifacts loses none."""
        from torchdev_runtime.controller import ReconcileRecord

        kinds = [kind] if kind else list(PLURALS)
        for k in kinds:
            base = self.runner_dir / k
            # <Kind>/<namespace>/<name>/artifacts/<run>, <Kind>/<name>/artifacts/<run> when cluster-scoped
            for status in base.glob(("*" if k in CLUSTER_SCOPED else "*/*") + "/artifacts/*/status"):
                run = status.parent
                if str(run) in self._seen or run.name == "latest":
                    continue
                ns, name = ("" if k in CLUSTER_SCOPED else run.parts[-4]), run.parts[-3]
                try:
                    state = status.read_text().strip()
                    started = min(p.stat().st_mtime for p in run.iterdir())
                    ended = status.stat().st_mtime
                    # a finalizer run: the role's reconcile block skipped, its deletionTimestamp set
                    finalizer = "deletionTimestamp is not defined\", \"skip_reason\"" in (run / "stdout").read_text(
                        errors="replace")
                except (OSError, ValueError):
                    continue
                if started < self._since:
                    continue
                self._seen[str(run)] = ReconcileRecord(
                    kind=k, namespace=ns, name=name, started=started,
                    duration=ended - started, ok=state == "successful", ran=True, run_seconds=ended - started,
                    error=None if state == "successful" else state,
                    finalizer_run=finalizer)
        recs = [r for r in self._seen.values() if kind is None or r.kind == kind]
        return sorted(recs, key=lambda r: r.started)

    def enqueue(self, kind: str, namespace: str, name: str) -> None:
        """Make ansible-operator reconcile one object now, as the local runtime's enqueue does: an
        annotation on it where its watch has watchAnnotationsChanges, else on an object it owns
        (its dependent watch: operator-lib's DependentPredicate passes any change but status)."""
        from kubernetes import client

        self._n += 1
        body = {"metadata": {"annotations": {"torchdev.io/e2e-enqueue": "%d-%f" % (self._n, time.time())}}}
        if kind in ANNOTATION_WATCHES:
            if kind in CLUSTER_SCOPED:
                self._custom.patch_cluster_custom_object(GROUP, VERSION, PLURALS[kind], name, body)
            else:
                self._custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name, body)
            return
        if kind in CLUSTER_SCOPED:
            obj = self._custom.get_cluster_custom_object(GROUP, VERSION, PLURALS[kind], name)
        else:
            obj = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)
        uid = obj["metadata"]["uid"]
        api = self._custom.api_client
        batch, core, rbac = client.BatchV1Api(api), client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        namespace = namespace or (obj.get("status") or {}).get("namespace") or ""  # a DevUser's namespace
        owned = [(batch.list_namespaced_job, batch.patch_namespaced_job),
                 (core.list_namespaced_config_map, core.patch_namespaced_config_map),
                 (core.list_namespaced_service, core.patch_namespaced_service),
                 (core.list_namespaced_pod, core.patch_namespaced_pod),
                 (core.list_namespaced_persistent_volume_claim, core.patch_namespaced_persistent_volume_claim),
                 (rbac.list_namespaced_role_binding, rbac.patch_namespaced_role_binding)]

        def patch_an_owned_object():
            ns = namespace or ((self._custom.get_cluster_custom_object(GROUP, VERSION, PLURALS[kind], name)
                                .get("status") or {}).get("namespace") if kind in CLUSTER_SCOPED else "")
            for lister, patcher in owned if ns else []:
                for item in lister(ns).items:
                    if any(r.uid == uid for r in item.metadata.owner_references or []):
                        patcher(item.metadata.name, ns, body)
                        return True
            return False

        try:  # the first run may still be making them
            wait_for(patch_an_owned_object, 60, 0.5, f"an object {kind} {namespace}/{name} owns")
        except TimeoutError:
            raise RuntimeError(f"{kind} {namespace}/{name}: ansible-operator reconciles it on a change of its "
                               "generation or of an object it owns, and it owns none yet") from None

    def reconciling(self, kind: str, namespace: str, name: str) -> bool:
        return not self.is_idle()

    def requeues(self, namespace: str, name: str) -> list[tuple[float, float]]:
        """(when, seconds) of each requeue_after ansible-operator set for the object: its log line
        "Set the reconciliation to occur after <d>", which names the object but not its kind."""
        from torchdev_runtime.gotime import parse_duration

        out = []
        prefix = "Set the reconciliation to occur after "
        for line in self.operator.log_path.read_text(errors="replace").splitlines():
            if prefix not in line:
                continue
            try:
                e = json.loads(line)
                if e.get("name") != name or (e.get("namespace") or "") != (namespace or ""):
                    continue
                out.append((_epoch(e["ts"]), parse_duration(e["msg"][len(prefix):])))
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def requeue_due_in(self, kind: str, namespace: str, name: str) -> float | None:
        """Seconds until the object's last requeue_after comes due; None when none is ahead."""
        last = self.requeues(namespace, name)[-1:]
        left = sum(last[0]) - time.time() if last else None
        return left if left is not None and left > 0 else None


class RealTier:
    """One control plane (+ Kueue, + the operator) at a time, for the modules asking for its
    nodes and Kueue setting."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.key: tuple | None = None
        self.parts: dict[str, Any] = {}

    def get(self, nodes: str, kueue: bool) -> dict[str, Any]:
        if self.key == (nodes, kueue):
            return self.parts
        self.close()
        self.key = (nodes, kueue)
        try:
            self.parts = self._start(nodes, kueue)
        except BaseException:
            self.close()
            raise
        return self.parts

    def _start(self, nodes: str, kueue: bool) -> dict[str, Any]:
        import pytest

        from hack.ansible_operator.run import BIN as OPERATOR_BIN
        from hack.cluster.control_plane import BIN_DIR, missing_binaries
        from hack.cluster.stack import Stack
        from hack.kueue.run import BIN as KUEUE_BIN

        missing = missing_binaries() + [b.name for b in (OPERATOR_BIN, KUEUE_BIN) if not b.is_file()]
        if missing:
            pytest.fail(f"the real tier is not built ({', '.join(missing)} missing in {BIN_DIR}): run "
                        "`make cluster-build`", pytrace=False)
        parts: dict[str, Any] = {}
        self.parts = parts
        work = pathlib.Path(tempfile.mkdtemp(prefix="real-", dir=self.root))
        parts["work"] = work
        parts["stack"] = Stack(work, nodes, kueue=kueue, audit=True)
        parts["stack"].up()  # on an error close() stops what started
        parts["cluster"] = parts["stack"].cluster
        parts["sim"] = RealSim(parts["cluster"], parts["stack"].kueue)
        return parts

    def runtime(self, env: dict[str, str], watches: str) -> RealRuntime:
        """The real ansible-operator with this environment and watches.yaml (restarted when a
        module asks for others)."""
        from hack.ansible_operator.run import AnsibleOperator

        config = (tuple(sorted(env.items())), watches)
        if self.parts.get("operator_config") != config:
            if "operator" in self.parts:
                self.parts.pop("operator").stop()
            self.parts.pop("runtime", None)
            self.parts["operator"] = AnsibleOperator(self.parts["cluster"].kubeconfig, tempfile.mkdtemp(
                prefix="operator-", dir=self.parts["work"]), env=env, watches=watches).start()
            self.parts["operator_config"] = config
            self.parts["runtime"] = RealRuntime(self.parts["operator"], self.parts["sim"])
        return self.parts["runtime"]

    def close(self) -> None:
        parts, self.parts, self.key = self.parts, {}, None
        for name in ("operator", "stack"):
            if name in parts:
                try:
                    parts[name].stop() if name == "operator" else parts[name].down()
                except Exception:  # noqa: BLE001 - stop the rest
                    pass
        if "work" in parts and not os.environ.get("TORCHDEV_KEEP_REAL_TIER"):
            shutil.rmtree(parts["work"], ignore_errors=True)


def tier() -> str:
    value = os.environ.get("TORCHDEV_E2E_TIER", "kubesim")
    if value not in ("kubesim", "real"):
        raise ValueError(f"TORCHDEV_E2E_TIER={value!r}: kubesim or real")
    return value

