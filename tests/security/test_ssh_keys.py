"""SSH keys never appear in the operator's output or in any status.

Dynamic: kubesim + the local runtime (ansible-runner artifacts kept: stdout and every job
event, what ansible-operator logs at its default verbosity and more) run a DevUser and a
DevServer reconcile with distinctive keys; the keys may be in the Secret / ConfigMap that
carry them to sshd, and nowhere in the artifacts, the statuses or the Events.
Static: every task whose result can hold the keys is no_log (see KEY_TASKS).
"""
from __future__ import annotations

import json

import pytest
import yaml

from _rbac import ROLES, TASK_KEYWORDS, _walk_tasks

from _e2e_helpers import GROUP, ROOT, VERSION, devserver, wait_ready

CANARY_USER = "TorchdevCanaryUserKey0123456789abcdefghij"
CANARY_SERVER = "TorchdevCanaryServerKey0123456789abcdefgh"
KEY_USER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI%s canary@user" % CANARY_USER
KEY_SERVER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI%s canary@server" % CANARY_SERVER


@pytest.fixture(scope="module")
def artifacts(sim, kube, tmp_path_factory):
    from torchdev_runtime.runtime import Runtime

    work = tmp_path_factory.mktemp("runner")
    rt = Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig, ansible_config=str(ROOT / "ansible.cfg"),
                 max_concurrent_reconciles=2, keep_artifacts=True, work_dir=str(work))
    rt.start()
    try:
        yield rt, work
    finally:
        rt.stop()


@pytest.fixture(scope="module")
def leaks(sim, kube, artifacts):
    """Run a DevUser and a DevServer with canary keys; where each key shows up."""
    rt, work = artifacts
    custom, core = kube["custom"], kube["core"]
    custom.create_cluster_custom_object(GROUP, VERSION, "devusers", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DevUser", "metadata": {"name": "canary"},
        "spec": {"email": "canary@example.com", "sshPublicKeys": [KEY_USER]}})
    ns = "dev-canary"

    def active():
        obj = custom.get_cluster_custom_object(GROUP, VERSION, "devusers", "canary")
        return obj if (obj.get("status") or {}).get("phase") == "Active" else None
    sim.wait_for(active, 120, interval=0.2, message="DevUser canary Active")
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                           devserver("canary", owner="canary@example.com", sshPublicKeys=[KEY_SERVER]))
    wait_ready(sim, kube, ns, "canary", timeout=120)
    assert rt.wait_idle(180)
    # the keys did reach sshd's inputs (the test is not vacuous)
    assert core.read_namespaced_secret("ssh-public-keys", ns).data
    assert CANARY_SERVER in core.read_namespaced_config_map("canary-ssh", ns).data["authorized_keys"]
    # ansible's output (artifacts/<run>/stdout, at ansible-operator's default verbosity 2);
    # env/ holds the run's inputs (the custom resource itself), as on ansible-operator's disk
    stdout = [p for p in work.rglob("stdout") if p.parent.parent.name == "artifacts"]
    assert stdout, "no ansible output was kept"
    statuses = json.dumps([custom.get_cluster_custom_object(GROUP, VERSION, "devusers", "canary").get("status"),
                           custom.get_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "canary").get("status")])
    events = json.dumps([e.to_dict() for e in core.list_event_for_all_namespaces().items], default=str)
    return {c: sorted({str(p.relative_to(work)).split("/")[0] for p in stdout if c in p.read_text(errors="replace")}
                      | ({"status"} if c in statuses else set()) | ({"events"} if c in events else set()))
            for c in (CANARY_USER, CANARY_SERVER)}


@pytest.mark.e2e
@pytest.mark.slow
def test_devuser_keys_never_in_output_status_or_events(leaks):
    assert leaks[CANARY_USER] == []


@pytest.mark.e2e
@pytest.mark.slow
def test_devserver_keys_never_in_output_status_or_events(leaks):
    assert leaks[CANARY_SERVER] == []


# --- static: no_log on every task whose result can hold the keys ---------------------------

# What carries keys in each role: the raw custom resource and its spec (sshPublicKeys), and
# the facts, templates and reads that hold them.  A task that references any of these in its
# arguments or vars, or registers a read of a Secret / the SSH ConfigMap, must be no_log.
KEY_NAMES = {
    "devuser": ("_torchdev_io_devuser", "sshPublicKeys", "devuser_objects", "devuser_to_apply",
                "devuser_observe", "devuser_observed", "secret/ssh-public-keys"),
    "devserver": ("_torchdev_io_devserver", "sshPublicKeys", "devserver_objects", "devserver_to_apply",
                  "devserver_observe", "devserver_observed", "devserver_cr", "devserver_spec", "configmap/ssh"),
}
# Tasks that reference a key-carrying name but whose result cannot hold a key: the name is
# only an input of a filter that returns something else (a reason each).
COMMON = ("hands the CR to the common role (include vars are not printed), whose tasks pass on "
          "its apiVersion, kind, metadata and a status only (k8s_status, the Event template)")
STATUS = ("the status the kind's rules computed from the CR (no key in it) and the CR's metadata, "
          "through the common role's status.yml")
KEY_FREE = {
    "devuser": {
        "apply.yml: Compute the objects to delete, to replace and to detach": "from devuser_live (redacted: no Secret data)",
        "finalize.yml: Decide what to suspend, detach and delete": "metadata of redacted objects and the Namespace only",
        "finalize.yml: Say that an adopted namespace is kept despite deletionPolicy Delete": COMMON,
        "main.yml: Report a problem with the spec": COMMON,
        "main.yml: Report a namespace the DevUser may not manage": COMMON,
        "main.yml: Record the failure": COMMON,
        "status.yml: Write the DevUser status": STATUS,
        "normalize.yml: Normalize the DevUser spec": "keeps the keys out of its facts (render.yml reads the raw spec)",
        "observe.yml: Summarise Kueue, the flavors, the namespace and the live objects":
            "devuser_live is redacted; the Namespace holds no keys",
        "render.yml: Compute the render context": "owner references of the CR only",
        "observe.yml: Decide whether to read the usage records": "the CR's status.usageRecords.oldestEndedAt only",
        "usage.yml: Decide which usage records have passed their retention":
            "the UsageRecords (no keys in them) and the CR's status.usageRecords.oldestEndedAt",
        # no_log would censor the result's period, which ansible-operator reads (and panics without)
        "status.yml: Look again soon after a write or until the quota is counted, else at the next retention end":
            "the length of devuser_to_apply only; a period",
    },
    "devserver": {
        "rejected.yml: Record the problem with the spec or its flavor": COMMON,
        "main.yml: Record the failure": COMMON,
        "status.yml: Write the DevServer status": STATUS,
        "status.yml: Look again soon while the server's pods are starting": "a period computed from the status",
        "observe.yml: Read the node of a NodePort server's first replica":
            "a Node read by name (its result holds no keys); of the spec only enableSSH and the service type",
    },
}


def _key_tasks(role):
    names = KEY_NAMES[role]
    for path in sorted((ROLES / role / "tasks").glob("*.yml")):
        for task, where in _walk_tasks(yaml.safe_load(path.read_text()), path.name):
            body = {k: v for k, v in task.items() if k not in TASK_KEYWORDS or k == "vars"}
            text = json.dumps(body)
            if any(n in text for n in names):
                yield "%s: %s" % (where, task.get("name")), task


@pytest.mark.parametrize("role", [
    "devuser",
    "devserver",
])
def test_tasks_touching_keys_are_no_log(role):
    missing = [what for what, task in _key_tasks(role)
               if not task.get("no_log") and what not in KEY_FREE.get(role, {})]
    assert not missing, "tasks of %s that may show SSH keys without no_log: true:\n  %s" % (role, "\n  ".join(missing))


@pytest.mark.parametrize("role", sorted(KEY_FREE))
def test_every_exemption_names_a_task_that_touches_keys(role):
    stale = set(KEY_FREE[role]) - {what for what, _ in _key_tasks(role)}
    assert not stale, "KEY_FREE entries of %s that match no task touching the keys: %s" % (role, sorted(stale))


def test_every_role_is_covered():
    assert sorted(KEY_NAMES) == sorted(p.parent.parent.name for p in ROLES.glob("*/tasks/main.yml")
                                       if "sshPublicKeys" in "".join(f.read_text() for f in (p.parent).glob("*.yml"))
                                       or (p.parent.parent / "templates").exists()
                                       and any("authorized_keys" in t.read_text() for t in (p.parent.parent / "templates").rglob("*.j2")))
