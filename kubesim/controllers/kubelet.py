"""kubelet: runs the pods bound to nodes (in simulation).

Pending -> Running with an IP from 10.244.0.0/16, container statuses and the
Initialized / PodReadyToStartContainers / ContainersReady / Ready / PodScheduled
conditions. Containers become ready `kubesim.io/ready-after` seconds (default 0.2)
after they start. `kubesim.io/fail-after: N` makes the first container exit 1 N
seconds after each start: with restartPolicy Always/OnFailure it is restarted after
a short CrashLoopBackOff (restartCount++, lastState terminated), with Never the pod
fails; `kubesim.io/exit-code` (default 1) is that exit code.  What the container wrote to its
terminationMessagePath is `kubesim.io/termination-message`: the terminated state's `message`,
as a kubelet reports it; with terminationMessagePolicy FallbackToLogsOnError, a failed
container that wrote none reports the end of its log (`kubesim.io/log`: the last 80 lines,
at most 2048 bytes). `kubesim.io/succeed-after: N` makes every container exit 0 after N seconds:
the pod Succeeds unless restartPolicy is Always (then the containers restart).

Timing is kept in memory per pod uid against time.monotonic(); the simulator is a
single process, so that is the whole truth.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from time import monotonic
from typing import Any, Hashable

from kubesim.controllers._util import (annotation, condition_true, fmt_time, now,
                                       pod_terminal, set_condition, try_get, write_status)
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]

READY_AFTER = "kubesim.io/ready-after"
FAIL_AFTER = "kubesim.io/fail-after"
SUCCEED_AFTER = "kubesim.io/succeed-after"
EXIT_CODE = "kubesim.io/exit-code"
TERMINATION_MESSAGE = "kubesim.io/termination-message"
LOG = "kubesim.io/log"
# kubelet's FallbackToLogsOnError: the last 80 lines of the log, at most 2048 bytes
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048
DEFAULT_READY_AFTER = 0.2
EPS = 0.001


def _seconds(pod: Obj, key: str, default: float | None) -> float | None:
    raw = annotation(pod, key)
    if raw is None or raw == "":
        return default
    try:
        v = float(str(raw).rstrip("s"))
    except ValueError:
        return default
    return max(v, 0.0)


def termination_message(pod: Obj, exit_code: int) -> str:
    """The first container's termination message: what it wrote to its terminationMessagePath
    (the annotation), else with FallbackToLogsOnError and a failure the tail of its log."""
    written = annotation(pod, TERMINATION_MESSAGE)
    if written:
        return str(written)[:4096]
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    if exit_code and containers[0].get("terminationMessagePolicy") == "FallbackToLogsOnError":
        tail = "\n".join(str(annotation(pod, LOG) or "").splitlines()[-LOG_TAIL_LINES:])
        return tail.encode()[-LOG_TAIL_BYTES:].decode(errors="ignore")
    return ""


def backoff(restarts: int) -> float:
    """The simulated CrashLoopBackOff: 0.1 s doubling per restart, at most 5 s."""
    return min(0.1 * 2 ** max(restarts - 1, 0), 5.0)


def qos_class(spec: Obj) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and str(req[r]) != str(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@dataclass
class PodRun:
    uid: str
    started: float
    started_ts: str
    ip: str
    run_start: float = 0.0          # current run of the first container
    run_start_ts: str = ""
    restarts: int = 0
    last_state: Obj = field(default_factory=dict)
    backoff_until: float | None = None
    backoff_s: float = 0.0


@register
class Kubelet(Controller):
    name = "kubelet"
    watches = ("pods",)

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        self.runs: dict[tuple[str, str], PodRun] = {}
        self._ip_seq = 0
        self._ips_in_use: set[str] = set()

    def keys_for(self, resource: str, obj: Obj):
        spec = obj.get("spec") or {}
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if not spec.get("nodeName") and key not in self.runs:
            return []
        return [key]

    # -- helpers -------------------------------------------------------------------
    def _allocate_ip(self) -> str:
        for _ in range(254 * 256):
            n = self._ip_seq
            self._ip_seq = (self._ip_seq + 1) % (254 * 256)
            ip = f"10.244.{n // 254}.{n % 254 + 1}"
            if ip not in self._ips_in_use:
                self._ips_in_use.add(ip)
                return ip
        raise RuntimeError("pod IP range exhausted")

    def _forget(self, key: tuple[str, str]) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            self._ips_in_use.discard(run.ip)

    def _wall(self, t: float) -> str:
        return fmt_time(now(self.cluster) - timedelta(seconds=max(monotonic() - t, 0.0)))

    # -- reconcile --------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        pod = try_get(self.api, "pods", ns, name)
        run = self.runs.get(key)  # type: ignore[arg-type]
        if pod is None or (run is not None and run.uid != pod["metadata"]["uid"]):
            self._forget(key)  # type: ignore[arg-type]
            run = None
            if pod is None:
                return None
        spec = pod.get("spec") or {}
        node_name = spec.get("nodeName")
        if pod["metadata"].get("deletionTimestamp") and not pod["metadata"].get("finalizers"):
            # graceful deletion: the containers are "stopped"; finish it like a kubelet does
            try:
                self.api.delete("pods", ns, name, grace_period_seconds=0,
                                preconditions={"uid": pod["metadata"]["uid"]})
            except (ApiError, TypeError):
                pass
            return None
        if not node_name or pod_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
            if pod_terminal(pod) and run is not None:
                self._ips_in_use.discard(run.ip)
            return None
        node = try_get(self.api, "nodes", None, node_name)
        if node is None:
            return 1.0  # bound to a node that does not exist (yet): stays Pending
        t = monotonic()
        if run is None:
            st = pod.get("status") or {}
            ip = st.get("podIP") or self._allocate_ip()
            self._ips_in_use.add(ip)
            ts = fmt_time(now(self.cluster))
            run = PodRun(uid=pod["metadata"]["uid"], started=t, started_ts=st.get("startTime") or ts,
                         ip=ip, run_start=t, run_start_ts=ts)
            self.runs[key] = run  # type: ignore[index]
        return self._step(pod, node, run, t)

    def _step(self, pod: Obj, node: Obj, run: PodRun, t: float) -> float | None:
        spec = pod.get("spec") or {}
        meta = pod["metadata"]
        policy = spec.get("restartPolicy") or "Always"
        ready_after = _seconds(pod, READY_AFTER, DEFAULT_READY_AFTER) or 0.0
        fail_after = _seconds(pod, FAIL_AFTER, None)
        succeed_after = _seconds(pod, SUCCEED_AFTER, None)
        containers = spec.get("containers") or []
        wakeups: list[float] = []
        phase = "Running"

        # leave a finished back-off: the first container runs again
        if run.backoff_until is not None and t >= run.backoff_until:
            run.run_start = run.backoff_until
            run.run_start_ts = self._wall(run.backoff_until)
            run.backoff_until = None
        if run.backoff_until is None:
            ends = []
            if fail_after is not None:
                ends.append((run.run_start + fail_after, "fail"))
            if succeed_after is not None:
                ends.append((run.run_start + succeed_after, "succeed"))
            if ends:
                when, what = min(ends)
                if t >= when:
                    end_ts = self._wall(when)
                    exit_code = int(_seconds(pod, EXIT_CODE, 1) or 1) if what == "fail" else 0
                    restart = policy == "Always" or (policy == "OnFailure" and what == "fail")
                    term = {"terminated": {"exitCode": exit_code,
                                           "reason": "Error" if exit_code else "Completed",
                                           "startedAt": run.run_start_ts, "finishedAt": end_ts,
                                           "containerID": self._cid(run, 0)}}
                    message = termination_message(pod, exit_code)
                    if message:
                        term["terminated"]["message"] = message
                    if restart:
                        run.restarts += 1
                        run.last_state = term
                        run.backoff_s = backoff(run.restarts)
                        run.backoff_until = max(when + run.backoff_s, t + EPS)
                    else:
                        phase = "Failed" if what == "fail" else "Succeeded"
                        run.last_state = term
                else:
                    wakeups.append(when)

        statuses = []
        all_ready = True
        for i, c in enumerate(containers):
            first = i == 0
            cs: Obj = {"name": c.get("name", f"c{i}"), "image": c.get("image", ""),
                       "imageID": self._image_id(c.get("image", "")),
                       "containerID": self._cid(run, i if not first else 0),
                       "restartCount": run.restarts if first else 0,
                       "lastState": {}}
            if phase in ("Failed", "Succeeded"):
                if first:
                    cs["state"] = run.last_state
                else:
                    cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed",
                                                  "startedAt": run.started_ts,
                                                  "finishedAt": run.last_state["terminated"]["finishedAt"],
                                                  "containerID": self._cid(run, i)}}
                cs.update(ready=False, started=False)
                all_ready = False
            elif first and run.backoff_until is not None:
                cs["state"] = {"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {run.backoff_s:g}s restarting failed "
                               f"container={cs['name']} pod={meta['name']}_"
                               f"{meta.get('namespace', '')}({meta['uid']})"}}
                cs["lastState"] = run.last_state
                cs.update(ready=False, started=False)
                all_ready = False
                wakeups.append(run.backoff_until)
            else:
                start, start_ts = (run.run_start, run.run_start_ts) if first else \
                    (run.started, run.started_ts)
                if first and run.restarts:
                    cs["lastState"] = run.last_state
                ready = t >= start + ready_after
                if not ready:
                    wakeups.append(start + ready_after)
                    all_ready = False
                cs["state"] = {"running": {"startedAt": start_ts}}
                cs.update(ready=ready, started=True)
            if first and run.restarts == 0 and phase == "Running":
                cs["lastState"] = {}
            statuses.append(cs)

        status = self._status(pod, node, run, phase, statuses, all_ready)
        if write_status(self.api, "pods", pod, status) is None:
            return 0.05  # conflict or gone: look again
        if phase != "Running":
            self._ips_in_use.discard(run.ip)
            return None
        if not wakeups:
            return None
        return max(min(wakeups) - t, 0.0) + EPS

    def _status(self, pod: Obj, node: Obj, run: PodRun, phase: str, statuses: list[Obj],
                containers_ready: bool) -> Obj:
        spec = pod.get("spec") or {}
        old = pod.get("status") or {}
        when = fmt_time(now(self.cluster))
        host_ip = next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"), "")
        conds = old.get("conditions")
        terminal = phase in ("Succeeded", "Failed")
        reason = "PodCompleted" if terminal else ("" if containers_ready else "ContainersNotReady")
        not_ready = [s["name"] for s in statuses if not s["ready"]]
        message = "" if containers_ready or terminal else \
            f"containers with unready status: [{' '.join(not_ready)}]"
        gates_ok = all(condition_true(pod, g.get("conditionType", ""))
                       for g in spec.get("readinessGates") or [])
        conds = set_condition(conds, "PodReadyToStartContainers", "False" if terminal else "True",
                              when=when, probe=True)
        conds = set_condition(conds, "Initialized", "True", when=when, probe=True)
        ready_status = "True" if containers_ready and gates_ok else "False"
        ready_reason = reason if ready_status == "False" and reason else (
            "ReadinessGatesNotReady" if ready_status == "False" else "")
        conds = set_condition(conds, "Ready", ready_status, ready_reason,
                              message if ready_status == "False" and not containers_ready else "",
                              when=when, probe=True)
        conds = set_condition(conds, "ContainersReady", "True" if containers_ready else "False",
                              reason, message, when=when, probe=True)
        conds = set_condition(conds, "PodScheduled", "True", when=when, probe=True)
        order = {"PodReadyToStartContainers": 0, "Initialized": 1, "Ready": 2,
                 "ContainersReady": 3, "PodScheduled": 4}
        conds.sort(key=lambda c: order.get(c.get("type"), 5))
        status: Obj = dict(old)
        status.update({
            "phase": phase,
            "conditions": conds,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}] if host_ip else [],
            "podIP": run.ip,
            "podIPs": [{"ip": run.ip}],
            "startTime": run.started_ts,
            "containerStatuses": statuses,
            "qosClass": qos_class(spec),
        })
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                {"name": c.get("name", f"init{i}"), "image": c.get("image", ""),
                 "imageID": self._image_id(c.get("image", "")),
                 "containerID": self._cid(run, 100 + i), "ready": True, "started": False,
                 "restartCount": 0, "lastState": {},
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                          "startedAt": run.started_ts,
                                          "finishedAt": run.started_ts,
                                          "containerID": self._cid(run, 100 + i)}}}
                for i, c in enumerate(spec.get("initContainers") or [])]
        status.pop("nominatedNodeName", None)
        return status

    @staticmethod
    def _image_id(image: str) -> str:
        repo = image.split("@", 1)[0]
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rsplit(":", 1)[0]
        first = repo.split("/", 1)[0]
        if "/" not in repo:
            repo = f"docker.io/library/{repo}"
        elif "." not in first and ":" not in first and first != "localhost":
            repo = f"docker.io/{repo}"
        return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"

    @staticmethod
    def _cid(run: PodRun, i: int) -> str:
        raw = f"{run.uid}/{i}/{run.restarts if i == 0 else 0}".encode()
        return "containerd://" + hashlib.sha256(raw).hexdigest()
