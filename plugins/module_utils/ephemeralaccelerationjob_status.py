# -*- coding: utf-8 -*-
# Apache-2.0
"""EphemeralAccelerationJob: the lifecycle of one run and the status the operator writes.

``decide`` looks at the job (its status is what earlier runs decided), its pod, its volume
and the current time, and says:

* ``phase``: Pending (creating the volume and the pod, the pod not running yet), Running,
  Succeeded or Failed.  Succeeded and Failed are final: a finished job never runs again.
* what the role keeps in place (``ensure``: render and apply the volume, the runner's
  ConfigMap and the pod -- a live pod is never re-applied, a pod's spec is immutable) and
  what it deletes (``delete``): the pod (with its ConfigMap) at ``finishedAt +
  ttlSecondsAfterFinished``, the volume at ``finishedAt + pvcTTLSecondsAfterFinished``.
* ``requeue``: the seconds until the next of those deadlines (per-object requeue, no
  polling) -- or, while the pod is pending or running, the watch period: a pod's progress is
  in its status, and status-only updates of a dependent do not reconcile its owner
  (ansible-operator's DependentPredicate).

A finished job whose pod and volume are gone is ``settled``: the role skips it without a
request (main.yml), and no requeue is asked for.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import codecs
import datetime
import json

from ansible_collections.torchdev.operator.plugins.module_utils import plan as planning
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    EAJ_EXIT_REASONS, EAJ_FINAL_PHASES, REASON_INVALID_SPEC)
from ansible_collections.torchdev.operator.plugins.module_utils.devserver_status import (
    _REFUSAL_LIMIT, _REFUSERS, REASON_POD_CREATE_REFUSED)
from ansible_collections.torchdev.operator.plugins.module_utils.ephemeralaccelerationjob import (
    claim_name, normalize, pod_name)
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import format_time, parse_time
from ansible_collections.torchdev.operator.plugins.module_utils.trainingjob_status import (
    IMAGE_PULL_REASONS, MESSAGE_LIMIT, requeue as _requeue)

OBJECTS = ("claim", "runner", "pod")
KINDS = {"claim": "PersistentVolumeClaim", "runner": "ConfigMap", "pod": "Pod"}


# --------------------------------------------------------------------------- helpers
def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _controller_uid(obj):
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def _ours(obj, uid):
    """A live object the job may use: controlled by the job, or by nobody (a volume devctl
    created before the job, which the role adopts)."""
    owner = _controller_uid(obj)
    return owner is None or owner == uid


def _later(when, seconds):
    try:
        return format_time(parse_time(when) + datetime.timedelta(seconds=int(seconds)))
    except OverflowError:   # past year 9999 (a huge TTL): never, as far as a status can say
        return "9999-12-31T23:59:59Z"


def _left(now, when):
    return (parse_time(when) - parse_time(now)).total_seconds()


def _container(pod):
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def _one_line(text, limit=MESSAGE_LIMIT):
    return " ".join(str(text or "").split())[:limit]


def pod_failure(pod):
    """(reason, message, exitCode) of a failed inference pod: the runner's exit code names
    the reason (InputNotFound, UnknownModel, ...: constants.EAJ_EXIT_REASONS) and its
    termination message (what it wrote to /dev/termination-log, else the end of its log) is
    the message."""
    st = (pod or {}).get("status") or {}
    term = (_container(pod).get("state") or {}).get("terminated") or {}
    code = term.get("exitCode")
    written = _one_line(term.get("message"))
    if code is None:
        why = _one_line(st.get("message") or st.get("reason") or "the inference pod failed")
        return "PodFailed", why, None
    code = int(code)
    reason = EAJ_EXIT_REASONS.get(code, "PodFailed")
    if written:
        return reason, written, code
    detail = " (%s)" % term["reason"] if term.get("reason") and term.get("reason") != "Error" else ""
    return reason, "the inference container exited with code %d%s" % (code, detail), code


def _pending_message(pod, claim, name):
    """Why the pod is not running yet."""
    if claim is None:
        return "creating the volume %s" % claim_name(name)
    if pod is None:
        return "creating the inference pod"
    for cond in ((pod.get("status") or {}).get("conditions")) or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return _one_line("the inference pod is not scheduled: %s" % (cond.get("message") or cond.get("reason")))
    if ((claim.get("status") or {}).get("phase")) != "Bound":
        return "waiting for the volume %s to bind" % claim_name(name)
    waiting = (_container(pod).get("state") or {}).get("waiting") or {}
    if waiting.get("reason"):
        return _one_line("the inference container is waiting: %s" % waiting["reason"])
    return "the inference pod is starting"


# --------------------------------------------------------------------------- decide
def decide(eaj, pod=None, claim=None, runner=None, now=None, watch_period=10):
    """What this reconcile does: {phase, reason, message, startedAt, finishedAt, podName,
    exitCode, artifactsExpireAt, artifacts: {status, reason, message}, ensure, delete,
    requeue}.

    ``pod``, ``claim``, ``runner``: the live objects named after the job (None when absent);
    ``now``: RFC 3339; ``watch_period``: seconds between looks at a running pod (2 at most
    while it is pending)."""
    eaj = eaj or {}
    spec = normalize(eaj.get("spec"))
    st = dict(eaj.get("status") or {})
    name = _meta(eaj).get("name") or ""
    uid = _meta(eaj).get("uid")
    now = format_time(now or datetime.datetime.now(datetime.timezone.utc))
    live = {"claim": claim, "runner": runner, "pod": pod}
    out = {
        "phase": st.get("phase") or "Pending", "reason": "", "message": st.get("message") or "",
        "startedAt": st.get("startedAt"), "finishedAt": st.get("finishedAt"), "podName": pod_name(name),
        "exitCode": st.get("exitCode"), "artifactsExpireAt": st.get("artifactsExpireAt"),
        "ensure": [], "delete": [], "requeue": None,
    }
    for cond in st.get("conditions") or []:  # a finished job keeps the reason it finished with
        if cond.get("type") == {"Succeeded": "Succeeded"}.get(out["phase"], "Failed") and cond.get("status") == "True":
            out["reason"] = cond.get("reason") or ""

    if out["phase"] not in EAJ_FINAL_PHASES:
        _observe_run(out, spec, name, uid, live, now, float(watch_period))
    if out["phase"] in EAJ_FINAL_PHASES:
        _clean_up(out, spec, name, uid, live, now, recorded=st.get("phase") in EAJ_FINAL_PHASES)
    out["artifacts"] = _artifacts(out, name, live, now)
    return out


def _observe_run(out, spec, name, uid, live, now, watch_period):
    pod, claim = live["pod"], live["claim"]
    foreign = [key for key in OBJECTS if live[key] is not None and not _ours(live[key], uid)]
    if foreign:
        # the objects of an earlier job of this name are still going away
        out.update(phase="Pending", reason="Pending", requeue=1.0,
                   message="waiting for the %s of an earlier job named %s to be deleted" % (
                       " and ".join(KINDS[k] for k in foreign), name))
        return
    out["ensure"] = list(OBJECTS)
    st = (pod or {}).get("status") or {}
    phase = st.get("phase")
    term = (_container(pod).get("state") or {}).get("terminated") or {}
    running = (_container(pod).get("state") or {}).get("running") or {}
    if pod is not None and not out["startedAt"] and phase in ("Running", "Succeeded", "Failed"):
        out["startedAt"] = format_time(running.get("startedAt") or term.get("startedAt") or st.get("startTime") or now)

    def finish(phase_, reason, message, code=None):
        out.update(phase=phase_, reason=reason, message=_one_line(message), exitCode=code, ensure=[],
                   finishedAt=format_time(term.get("finishedAt") or now), requeue=None)

    if pod is None:
        if out["phase"] == "Running":
            return finish("Failed", "PodDeleted", "the inference pod %s was deleted before it finished" % pod_name(name))
        out.update(phase="Pending", reason="Pending", message=_pending_message(None, claim, name),
                   requeue=min(2.0, watch_period))
        return
    if _meta(pod).get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        return finish("Failed", "PodDeleted", "the inference pod %s was deleted before it finished" % pod_name(name))
    if phase == "Succeeded":
        return finish("Succeeded", "InferenceSucceeded",
                      "inference finished: the results are in %s" % spec["output"]["path"], 0)
    if phase == "Failed":
        reason, message, code = pod_failure(pod)
        return finish("Failed", reason, message, code)
    waiting = (_container(pod).get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in IMAGE_PULL_REASONS:
        return finish("Failed", "ImagePullFailed", "cannot pull the image %s: %s%s" % (
            spec["image"], waiting["reason"], " (%s)" % waiting["message"] if waiting.get("message") else ""))
    if phase == "Running":
        out.update(phase="Running", reason="Running", message="the inference pod is running", requeue=watch_period)
        return
    out.update(phase="Pending", reason="Pending", message=_pending_message(pod, claim, name),
               requeue=min(2.0, watch_period))


def _clean_up(out, spec, name, uid, live, now, recorded=True):
    """A finished job: delete the pod (and its ConfigMap) and the volume when their TTLs pass.

    Only once the status records the end (``recorded``: the phase was final when the run
    began): the run that sees the job finish writes its status first and looks again in a
    second.  Deleting in that run would lose the finish if its status write failed: the next
    run, seeing no pod and no recorded end, would start the job again (or call it PodDeleted),
    and the volume would have gone before the expiry the status finally shows."""
    finished = out["finishedAt"] or now
    out["finishedAt"] = finished
    due = {"pod": _later(finished, spec["ttlSecondsAfterFinished"]),
           "claim": _later(finished, spec["pvcTTLSecondsAfterFinished"])}
    due["runner"] = due["pod"]
    out["artifactsExpireAt"] = due["claim"]
    waits = []
    for key in OBJECTS:
        obj = live[key]
        if obj is None or _meta(obj).get("deletionTimestamp") or _controller_uid(obj) != uid:
            continue  # gone, going, or not the job's (the garbage collector's business)
        left = _left(now, due[key])
        if left <= 0 and recorded:
            out["delete"].append(key)
        else:
            waits.append(max(left, 1.0))
    out["requeue"] = min(waits) if waits else None


def _artifacts(out, name, live, now):
    """The ArtifactsAvailable condition: may the user still download the results?"""
    claim = live["claim"]
    volume = claim_name(name)
    if out["phase"] in EAJ_FINAL_PHASES:
        if claim is not None and "claim" not in out["delete"] and not _meta(claim).get("deletionTimestamp"):
            return {"status": "True", "reason": "Bound",
                    "message": "%s is kept until %s (pvcTTLSecondsAfterFinished)" % (volume, out["artifactsExpireAt"])}
        if _left(now, out["artifactsExpireAt"]) <= 0:
            return {"status": "False", "reason": "Expired",
                    "message": "%s was deleted at %s (pvcTTLSecondsAfterFinished)" % (volume, out["artifactsExpireAt"])}
        return {"status": "False", "reason": "Deleted", "message": "%s was deleted before its TTL" % volume}
    if claim is None:
        return {"status": "False", "reason": "ClaimPending", "message": "creating %s" % volume}
    if ((claim.get("status") or {}).get("phase")) != "Bound":
        return {"status": "False", "reason": "ClaimPending", "message": "%s is not bound yet" % volume}
    return {"status": "True", "reason": "Bound", "message": "%s is mounted at /artifacts" % volume}


# --------------------------------------------------------------------------- a refused pod
# The look again at a pod admission refuses: as long as it has been refused so far, 5 s to 60 s
# (a doubling back-off without a counter: a quota freed or raised is seen, no retry storm).
REFUSED_REQUEUE = (5.0, 60.0)
_STATUS_LIMIT = 16384  # characters of a failed apply's message read for the API server's Status


def _api_status(text):
    """The metav1.Status in kubernetes.core.k8s's message of a failed request ("Failed to apply
    object: b'{...}'": the body as Python shows bytes, or as text), else {}."""
    if not isinstance(text, str) or "{" not in text:
        return {}
    text = text[:_STATUS_LIMIT]
    body = text[text.index("{"):text.rindex("}") + 1] if "}" in text else ""
    candidates = [body]
    if "b'{" in text or 'b"{' in text:   # bytes as Python shows them: undo its escapes (not an eval)
        try:
            candidates.insert(0, codecs.escape_decode(body.encode("utf-8"))[0].decode("utf-8", "replace"))
        except (ValueError, UnicodeError):
            pass
    for candidate in candidates:
        try:
            status = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(status, dict) and status.get("kind") == "Status":
            return status
    return {}


def pod_refusal(register, name):
    """"pod ephemeralaccelerationjob-x refused by ResourceQuota: exceeded quota: ..." when the
    role's failed apply (``register``: kubernetes.core.k8s's result) is admission's 403 for the
    job's pod (``name``: the job's): kube-apiserver's Status, code 403, whose message is ``pods
    "<the pod>" is forbidden: <why>``; what refused it named when the message says (ResourceQuota,
    LimitRange, PodSecurity, else "admission"); printable, at most 512 characters.  "" for any
    other result (a success, another failure: those fail the run as before).  ``failed`` is not
    asked for: the apply task's failed_when clears it for this refusal, and the tasks after it
    read the same result.  Never raises."""
    if not isinstance(register, dict) or not isinstance(name, str):
        return ""
    status = _api_status(register.get("msg"))
    message = status.get("message")
    pod = pod_name(name)
    prefix = 'pods "%s" is forbidden: ' % pod
    if status.get("code") != 403 or not isinstance(message, str) or not message.startswith(prefix):
        return ""
    why = message[len(prefix):]
    refuser = next((who for words, who in _REFUSERS if words in why), "admission")
    why = " ".join("".join(ch if ch.isprintable() else " " for ch in why[:4 * _REFUSAL_LIMIT]).split())
    text = "pod %s refused by %s: %s" % (pod, refuser, why)
    return text if len(text) <= _REFUSAL_LIMIT else text[:_REFUSAL_LIMIT - 3] + "..."


def refused(decision, refusal, eaj, now):
    """The decision of a run whose pod admission refused (``refusal``: pod_refusal's text): still
    Pending, the message saying why, ``refusal`` kept for the status (Degraded PodCreateRefused)
    and the look again after as long as it has been refused (the Degraded condition's
    lastTransitionTime in ``eaj``'s status), within REFUSED_REQUEUE.  Unchanged when there is no
    refusal or the decision is not Pending."""
    decision = decision if isinstance(decision, dict) else {}
    if not refusal or not isinstance(refusal, str) or decision.get("phase") != "Pending":
        return decision
    low, high = REFUSED_REQUEUE
    wait = low
    status = (eaj or {}).get("status") if isinstance(eaj, dict) else None
    for cond in (status or {}).get("conditions") or [] if isinstance(status, dict) else []:
        if isinstance(cond, dict) and cond.get("type") == "Degraded" and cond.get("status") == "True" \
                and cond.get("reason") == REASON_POD_CREATE_REFUSED:
            try:
                wait = min(max(_left(cond.get("lastTransitionTime"), now), low), high)
            except (TypeError, ValueError, OverflowError):
                wait = low
    return dict(decision, refusal=refusal[:_REFUSAL_LIMIT], message=_one_line("the inference %s" % refusal),
                requeue=wait)


# --------------------------------------------------------------------------- the plan
def converge(desired, decision, claim=None, runner=None, pod=None):
    """{objects, to_apply, to_prune} of a reconcile.  ``desired``: the stamped objects the
    role rendered (what ``decision.ensure`` names); ``claim``, ``runner``, ``pod``: the live
    ones.  Only what is missing or drifted is applied, never a live pod (immutable: it was
    created once, for this job); what the decision deletes is pruned."""
    live = {"claim": claim, "runner": runner, "pod": pod}
    desired = list(desired or [])
    keep = [obj for obj in desired if not (obj.get("kind") == "Pod" and pod is not None)]
    prune = []
    deleting = (decision or {}).get("delete") or []
    for key in [k for k in ("pod", "runner", "claim") if k in deleting]:  # the pod first: it uses the volume
        meta = _meta(live.get(key))
        if meta.get("name"):
            prune.append({"apiVersion": live[key].get("apiVersion") or "v1", "kind": KINDS[key],
                          "metadata": {"name": meta["name"], "namespace": meta.get("namespace")}})
    return {"objects": desired, "to_apply": planning.drift(keep, [obj for obj in live.values() if obj]),
            "to_prune": prune}


# --------------------------------------------------------------------------- status
def _conditions(phase, reason, message, artifacts, generation):
    def c(ctype, status, why, msg=""):
        return {"type": ctype, "status": status, "reason": why, "message": _one_line(msg),
                "observedGeneration": generation}
    succeeded = c("Succeeded", "True", reason or "InferenceSucceeded", message) if phase == "Succeeded" else \
        c("Succeeded", "False", phase)
    failed = c("Failed", "True", reason or "PodFailed", message) if phase == "Failed" else c("Failed", "False", phase)
    art = artifacts or {"status": "False", "reason": "ClaimPending", "message": ""}
    return [succeeded, failed, c("ArtifactsAvailable", art["status"], art["reason"], art.get("message", "")),
            c("Degraded", "False", "AsExpected")]


def status(eaj, decision):
    """The status of a job: phase, message, times, pod, artifact path, conditions (Degraded True
    PodCreateRefused while admission refuses the pod: ``decision.refusal``, see refused)."""
    eaj = eaj or {}
    spec = normalize(eaj.get("spec"))
    generation = int(_meta(eaj).get("generation") or 0)
    d = decision or {}
    phase = d.get("phase") or "Pending"
    final = phase in EAJ_FINAL_PHASES
    conditions = _conditions(phase, d.get("reason"), d.get("message"), d.get("artifacts"), generation)
    if d.get("refusal") and phase == "Pending":
        conditions[3] = {"type": "Degraded", "status": "True", "reason": REASON_POD_CREATE_REFUSED,
                         "message": _one_line(d["refusal"]), "observedGeneration": generation}
    return {
        "observedGeneration": generation,
        "phase": phase,
        "message": _one_line(d.get("message")),
        "startedAt": d.get("startedAt"),
        "finishedAt": d.get("finishedAt") if final else None,
        "podName": d.get("podName"),
        "artifactPath": spec["output"]["path"] if phase == "Succeeded" else None,
        "artifactsExpireAt": d.get("artifactsExpireAt") if final else None,
        "exitCode": d.get("exitCode") if final and d.get("exitCode") is not None else None,
        "conditions": conditions,
    }


def rejected_status(eaj, failure):
    """The status of a job whose spec cannot run (common problem.yml): Failed with the reason
    (InvalidSpec), Degraded True."""
    eaj = eaj or {}
    generation = int(_meta(eaj).get("generation") or 0)
    failure = failure or {}
    reason, message = failure.get("reason") or REASON_INVALID_SPEC, _one_line(failure.get("message"))
    conds = _conditions("Failed", reason, message, None, generation)
    conds[3] = {"type": "Degraded", "status": "True", "reason": reason, "message": message,
                "observedGeneration": generation}
    return {"observedGeneration": generation, "phase": "Failed", "message": message, "conditions": conds}


def settled(eaj, now=None):
    """True for a finished job with nothing left to clean up: its volume is gone
    (ArtifactsAvailable False) and its pod's TTL has passed (the pod went in that run or
    before; pvcTTLSecondsAfterFinished >= ttlSecondsAfterFinished).  The role skips it:
    no request, no requeue."""
    eaj = eaj or {}
    st = eaj.get("status") or {}
    if st.get("phase") not in EAJ_FINAL_PHASES or not st.get("finishedAt"):
        return False
    available = [c for c in st.get("conditions") or [] if c.get("type") == "ArtifactsAvailable"]
    if not available or available[0].get("status") != "False" or available[0].get("reason") not in ("Expired", "Deleted"):
        return False
    now = format_time(now or datetime.datetime.now(datetime.timezone.utc))
    pod_due = _later(st["finishedAt"], normalize(eaj.get("spec"))["ttlSecondsAfterFinished"])
    return _left(now, pod_due) <= 0


def requeue(decision):
    """The requeue period of ``decision`` for requeue_after (``"<n>s"``), or ""."""
    return _requeue(decision)
