"""Pod Security Standards: every pod the roles render (each role over its sample matrix, see
hack/render_manifests.py) and the operator's own Deployment meet the restricted profile, and
the namespaces torchdev creates enforce it."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from _pss import pod_specs, violations
from hack import render_manifests

ROOT = Path(__file__).resolve().parents[2]


def _case_ids():
    return [(role, case) for role, cases in render_manifests.role_cases().items() for case in cases]


CASES = _case_ids()


def _pods(objects):
    for obj in objects:
        for pod, meta in pod_specs(obj):
            yield "%s %s" % (obj["kind"], obj["metadata"]["name"]), pod, meta


@pytest.mark.parametrize("role, case", CASES, ids=["%s/%s" % c for c in CASES])
def test_rendered_pods_are_restricted(rendered, role, case):
    problems = ["%s: %s" % (what, v) for what, pod, meta in _pods(rendered[role][case]) for v in violations(pod, meta)]
    assert not problems, "\n".join(problems)


def test_every_role_renders_pods_somewhere(rendered):
    """The check above is not vacuous: the DevServer matrix has StatefulSets."""
    assert any(True for cases in rendered.values() for objs in cases.values() for _ in _pods(objs))


def test_operator_deployment_is_restricted(deployed):
    pods = list(_pods(deployed))
    assert [what for what, _, _ in pods] == ["Deployment torchdev-controller-manager"]
    (_, pod, meta), = pods
    assert violations(pod, meta) == []


def test_namespaces_enforce_restricted(rendered, deployed):
    namespaces = [o for o in deployed if o["kind"] == "Namespace"]
    namespaces += [o for cases in rendered.values() for objs in cases.values() for o in objs if o["kind"] == "Namespace"]
    assert namespaces
    for ns in namespaces:
        assert ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "restricted", ns["metadata"]["name"]


# --- the checker catches each control ------------------------------------------------------

GOOD = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "image": "i", "ports": [{"name": "p", "containerPort": 80}],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
    "volumes": [{"name": "v", "emptyDir": {}}],
}


def _bad(path, value):
    pod = copy.deepcopy(GOOD)
    target = pod
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return pod


@pytest.mark.parametrize("path, value, needle", [
    (("hostNetwork",), True, "hostNetwork"),
    (("hostPID",), True, "hostPID"),
    (("hostIPC",), True, "hostIPC"),
    (("containers", 0, "securityContext", "privileged"), True, "privileged"),
    (("containers", 0, "securityContext", "allowPrivilegeEscalation"), True, "allowPrivilegeEscalation"),
    (("containers", 0, "securityContext", "capabilities"), {"drop": ["NET_RAW"]}, "drop: must include ALL"),
    (("containers", 0, "securityContext", "capabilities"), {"drop": ["ALL"], "add": ["SYS_ADMIN"]}, "capabilities.add"),
    (("containers", 0, "securityContext", "capabilities"), {"drop": ["ALL"], "add": ["CHOWN"]}, "capabilities.add"),
    (("containers", 0, "securityContext", "runAsNonRoot"), False, "runAsNonRoot"),
    (("containers", 0, "securityContext", "runAsUser"), 0, "runAsUser"),
    (("containers", 0, "securityContext", "procMount"), "Unmasked", "procMount"),
    (("containers", 0, "securityContext", "seccompProfile"), {"type": "Unconfined"}, "seccompProfile"),
    (("containers", 0, "securityContext", "seLinuxOptions"), {"type": "spc_t"}, "seLinuxOptions.type"),
    (("containers", 0, "securityContext", "seLinuxOptions"), {"user": "root"}, "seLinuxOptions.user"),
    (("containers", 0, "securityContext", "appArmorProfile"), {"type": "Unconfined"}, "appArmorProfile"),
    (("containers", 0, "securityContext", "windowsOptions"), {"hostProcess": True}, "HostProcess"),
    (("containers", 0, "ports"), [{"name": "p", "containerPort": 80, "hostPort": 80}], "hostPort"),
    (("securityContext", "runAsNonRoot"), None, "runAsNonRoot"),
    (("securityContext", "seccompProfile"), None, "seccompProfile"),
    (("securityContext", "sysctls"), [{"name": "kernel.msgmax", "value": "1"}], "sysctls"),
    (("volumes",), [{"name": "h", "hostPath": {"path": "/"}}], "hostPath"),
    (("volumes",), [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "volume type"),
])
def test_checker_catches(path, value, needle):
    pod = _bad(path, value)
    found = violations(pod)
    assert any(needle in v for v in found), found


def test_checker_passes_the_good_pod_and_allows_what_restricted_allows():
    assert violations(GOOD) == []
    pod = _bad(("containers", 0, "securityContext", "capabilities"), {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})
    assert violations(pod) == []
    pod = _bad(("securityContext", "sysctls"), [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}])
    assert violations(pod) == []
    assert violations(_bad(("volumes",), [{"name": "p", "projected": {"sources": []}}])) == []
