"""devctl admin onboard | offboard | users against kubesim with the DevUser CRD.

No operator runs: tests play the DevUser role by writing status (and a finalizer, to see
what offboard does to the object before it goes).
"""
from __future__ import annotations

import threading
import time

import pytest
import yaml

from devctl_helpers import as_json, invoke, unique
from devuser_helpers import ED25519

FINALIZER = "torchdev.io/devuser-cleanup"


@pytest.fixture
def admin(sim, users):
    def run(*args, input=None):
        return invoke(["--kubeconfig", sim.kubeconfig, "admin", *args], input=input)

    return run


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "alice.pub"
    path.write_text(ED25519.format("alice@laptop") + "\n")
    return path


def _error(result, code=1) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# -- onboard ----------------------------------------------------------------------------------

def test_onboard_creates_the_devuser(admin, users, key_file):
    name = unique("alice")
    obj = as_json(admin("onboard", name, "--email", f"{name}@example.com", "--ssh-key-file", key_file,
                        "--gpus", "8", "--cpu", "32", "--memory", "128Gi",
                        "--flavor-quota", "gpu-h100-8=16,memory=2Ti", "--flavor-quota", "cpu-small=0",
                        "--cluster-queue", "team-a", "--priority-class", "torchdev-high",
                        "--ssh-cidr", "10.0.0.0/8", "--ssh-cidr", "192.168.1.0/24",
                        "--deletion-policy", "Delete", "-o", "json"))
    assert obj["metadata"]["name"] == name
    stored = users.get(name)
    spec = stored["spec"]
    assert spec["email"] == f"{name}@example.com"
    assert spec["sshPublicKeys"] == [ED25519.format("alice@laptop")]
    assert spec["quota"]["gpus"] == 8 and spec["quota"]["cpu"] == "32" and spec["quota"]["memory"] == "128Gi"
    assert spec["quota"]["flavors"] == [{"name": "gpu-h100-8", "gpus": 16, "memory": "2Ti"},
                                        {"name": "cpu-small", "gpus": 0}]
    assert spec["queue"] == {"clusterQueue": "team-a", "priorityClass": "torchdev-high"}
    assert spec["network"]["sshAllowedCIDRs"] == ["10.0.0.0/8", "192.168.1.0/24"]
    assert spec["deletionPolicy"] == "Delete"
    assert spec["quota"]["storage"] == "2Ti"  # CRD default: devctl sends only what it is given
    managers = {(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]}
    assert ("devctl", "Apply") in managers


def test_onboard_again_is_unchanged_and_updates_keep_other_fields(admin, users, key_file):
    name = unique("bob")
    args = ["onboard", name, "--email", f"{name}@example.com", "--ssh-key-file", key_file, "--gpus", "4",
            "--ssh-cidr", "10.1.0.0/16"]
    first = admin(*args)
    assert first.exit_code == 0, first.stderr
    assert first.stdout.strip() == f"devuser.torchdev.io/{name} created"
    version = users.get(name)["metadata"]["resourceVersion"]

    again = admin(*args)
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() == f"devuser.torchdev.io/{name} unchanged"
    assert users.get(name)["metadata"]["resourceVersion"] == version

    # only --gpus (and no --email: the user exists): the rest devctl set stays
    update = admin("onboard", name, "--gpus", "16")
    assert update.exit_code == 0, update.stderr
    assert update.stdout.strip() == f"devuser.torchdev.io/{name} configured"
    spec = users.get(name)["spec"]
    assert spec["quota"]["gpus"] == 16
    assert spec["sshPublicKeys"] == [ED25519.format("alice@laptop")]
    assert spec["network"]["sshAllowedCIDRs"] == ["10.1.0.0/16"]
    assert spec["email"] == f"{name}@example.com"


def test_onboard_updates_a_devuser_created_by_someone_else(admin, users):
    name = unique("carol")
    users.create(name, f"{name}@example.com", quota={"gpus": 2})
    result = admin("onboard", name, "--priority-class", "torchdev-low")
    assert result.exit_code == 0, result.stderr
    spec = users.get(name)["spec"]
    assert spec["queue"]["priorityClass"] == "torchdev-low"
    assert spec["quota"]["gpus"] == 2 and spec["email"] == f"{name}@example.com"


def test_onboard_new_user_needs_email(admin, users):
    name = unique("dave")
    line = _error(admin("onboard", name, "--gpus", "1"), code=2)
    assert "--email" in line
    assert not users.exists(name)


@pytest.mark.parametrize("text, message", [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
     "is a private key; pass the .pub file"),
    ("ssh-ed25519 not-base64 me\n", "not an OpenSSH public key"),
])
def test_onboard_refuses_bad_key_files(admin, users, tmp_path, text, message):
    path = tmp_path / "key"
    path.write_text(text)
    name = unique("erin")
    line = _error(admin("onboard", name, "--email", "erin@example.com", "--ssh-key-file", path), code=2)
    assert message in line and "--ssh-key-file" in line
    assert not users.exists(name)


@pytest.mark.parametrize("args, message", [
    (["--ssh-cidr", "10.0.0.0"], "not a CIDR"),
    (["--ssh-cidr", "300.0.0.0/8"], "not a CIDR"),
    (["--flavor-quota", "gpu-h100-8"], "FLAVOR=GPUS"),
    (["--flavor-quota", "gpu-h100-8=x"], "FLAVOR=GPUS"),
    (["--flavor-quota", "gpu-h100-8=2,disk=1Ti"], "cpu=Q or memory=Q"),
    (["--cpu", "lots"], "not a quantity"),
    (["--gpus", "-1"], "--gpus"),
    (["--email", "not-an-email"], "not an e-mail address"),
    (["--deletion-policy", "Destroy"], "--deletion-policy"),
])
def test_onboard_rejects_bad_options(admin, users, args, message):
    name = unique("frank")
    argv = ["onboard", name] + (["--email", "f@example.com"] if "--email" not in args else []) + args
    line = _error(admin(*argv), code=2)
    assert message in line
    assert not users.exists(name)


def test_onboard_rejects_bad_username(admin):
    line = _error(admin("onboard", "Alice_1", "--email", "a@example.com"), code=2)
    assert "not a valid username" in line


def test_onboard_checks_bounds_before_calling_the_api(admin, users):
    name = unique("gina")
    line = _error(admin("onboard", name, "--email", "g@example.com", "--flavor-quota",
                        "gpu-h100-8=5000"), code=2)
    assert "at most 4096" in line
    cidrs = sum((["--ssh-cidr", f"10.{i}.0.0/16"] for i in range(17)), [])
    line = _error(admin("onboard", name, "--email", "g@example.com", *cidrs), code=2)
    assert "at most 16" in line
    assert not users.exists(name)


def test_onboard_api_rejection_is_one_line_naming_the_field(admin, users):
    name = unique("gus")
    line = _error(admin("onboard", name, "--email", "g@example.com", "--cluster-queue", "Team_A"))
    assert "spec.queue.clusterQueue" in line
    assert not users.exists(name)


def test_onboard_dry_run_client_makes_no_api_calls(admin, users, sim, key_file):
    name = unique("hank")
    sim.reset_metrics()
    result = admin("onboard", name, "--email", "h@example.com", "--ssh-key-file", key_file, "--gpus", "2",
                   "--dry-run")
    assert result.exit_code == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    assert obj["kind"] == "DevUser" and obj["spec"]["quota"] == {"gpus": 2}
    assert sim.requests() == []
    assert not users.exists(name)


def test_onboard_dry_run_server_shows_defaults_and_stores_nothing(admin, users):
    name = unique("ivy")
    obj = as_json(admin("onboard", name, "--email", "i@example.com", "--dry-run=server", "-o", "json"))
    assert obj["spec"]["quota"]["storage"] == "2Ti"
    assert obj["spec"]["deletionPolicy"] == "Retain"
    assert not users.exists(name)


def _operator(users, name, delay=0.15, **kwargs):
    def run():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not users.exists(name):
            time.sleep(0.02)
        users.set_status(name, phase="Pending")
        time.sleep(delay)
        users.ready(name, **kwargs)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_onboard_wait_prints_namespace_queue_and_next_steps(admin, users, key_file):
    name = unique("jack")
    thread = _operator(users, name, kueue=True)
    result = admin("onboard", name, "--email", f"{name}@example.com", "--ssh-key-file", key_file,
                   "--wait", "--timeout", "20s")
    thread.join(5)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"namespace: dev-{name}" in out
    assert f"queue:     torchdev (ClusterQueue torchdev-{name})" in out
    assert f"devctl config set-namespace dev-{name}" in out
    assert "Pending" in result.stderr and "Active" in result.stderr  # progress, one line per change


def test_onboard_wait_json_keeps_stdout_parseable(admin, users):
    name = unique("kate")
    thread = _operator(users, name, kueue=False)
    obj = as_json(admin("onboard", name, "--email", "k@example.com", "--wait", "--timeout", "20s",
                        "-o", "json"))
    thread.join(5)
    assert obj["status"]["phase"] == "Active" and obj["status"]["kueue"] is False


def test_onboard_wait_fails_fast_on_invalid_spec(admin, users):
    name = unique("liam")

    def run():
        while not users.exists(name):
            time.sleep(0.02)
        users.set_status(name, phase="Failed", conditions=[
            {"type": "Ready", "status": "False", "reason": "ReconcileFailed", "message": "invalid",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Degraded", "status": "True", "reason": "InvalidSpec",
             "message": "ClusterQueue team-x not found", "lastTransitionTime": "2026-01-01T00:00:00Z"}])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    start = time.monotonic()
    line = admin("onboard", name, "--email", "l@example.com", "--wait", "--timeout", "300s")
    thread.join(5)
    assert time.monotonic() - start < 240  # ended by the Failed status, long before the timeout
    assert line.exit_code == 1
    assert "ClusterQueue team-x not found" in line.stderr.strip().splitlines()[-1]


# -- offboard ---------------------------------------------------------------------------------

def _onboarded(users, name, **spec):
    users.create(name, f"{name}@example.com", **spec)
    users.custom.patch_cluster_custom_object("torchdev.io", "v1alpha1", "devusers", name,
                                             {"metadata": {"finalizers": [FINALIZER]}})
    users.ready(name, kueue=False)


def _release(users, name):
    users.custom.patch_cluster_custom_object("torchdev.io", "v1alpha1", "devusers", name,
                                             {"metadata": {"finalizers": None}})


def test_offboard_keeps_the_data_by_default(admin, users):
    name = unique("mia")
    _onboarded(users, name, deletionPolicy="Delete")
    result = admin("offboard", name)
    assert result.exit_code == 0, result.stderr
    obj = users.get(name)  # held by the operator's finalizer
    assert obj["metadata"].get("deletionTimestamp")
    assert obj["spec"]["deletionPolicy"] == "Retain"  # the command's default wins over onboarding's
    assert "deletionPolicy" in result.stderr and "Retain" in result.stderr
    assert f"kept namespace dev-{name}" in result.stdout and "suspended" in result.stdout
    _release(users, name)


def test_offboard_delete_data_refuses_without_tty_and_yes(admin, users):
    name = unique("noah")
    _onboarded(users, name)
    line = _error(admin("offboard", name, "--delete-data"))
    assert "without confirmation" in line and "--yes" in line
    obj = users.get(name)
    assert not obj["metadata"].get("deletionTimestamp")
    assert obj["spec"]["deletionPolicy"] == "Retain"
    _release(users, name)


def test_offboard_delete_data_with_yes(admin, users):
    name = unique("olga")
    _onboarded(users, name)
    result = admin("offboard", name, "--delete-data", "--yes")
    assert result.exit_code == 0, result.stderr
    obj = users.get(name)
    assert obj["metadata"].get("deletionTimestamp") and obj["spec"]["deletionPolicy"] == "Delete"
    assert "deleted with every dev server and volume" in result.stdout
    _release(users, name)


@pytest.mark.parametrize("annotations", [{}, {"torchdev.io/adopted-by": "devuser/x"}])
def test_offboard_delete_data_refuses_a_namespace_torchdev_did_not_create(admin, users, annotations):
    name = unique("rita")
    users.namespace(f"dev-{name}", annotations=annotations)
    _onboarded(users, name)
    line = _error(admin("offboard", name, "--delete-data", "--yes"))
    assert f"namespace dev-{name} was not created by torchdev" in line
    obj = users.get(name)
    assert not obj["metadata"].get("deletionTimestamp") and obj["spec"]["deletionPolicy"] == "Retain"
    _release(users, name)


def test_offboard_delete_data_of_a_created_namespace(admin, users):
    name = unique("sam")
    users.namespace(f"dev-{name}", annotations={"torchdev.io/created-by": f"devuser/{name}"})
    _onboarded(users, name)
    assert admin("offboard", name, "--delete-data", "--yes").exit_code == 0
    assert users.get(name)["spec"]["deletionPolicy"] == "Delete"
    _release(users, name)


def test_onboard_adopt_namespace(admin, users):
    name = unique("tom")
    result = admin("onboard", name, "--email", f"{name}@example.com", "--adopt-namespace", "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert users.get(name)["spec"]["adoptNamespace"] is True
    assert admin("onboard", name, "--gpus", "2").exit_code == 0  # kept when not given again
    assert users.get(name)["spec"]["adoptNamespace"] is True


@pytest.mark.parametrize("answer, deleted", [("y\n", True), ("n\n", False)])
def test_offboard_delete_data_asks_on_a_terminal(admin, users, monkeypatch, answer, deleted):
    import devctl.admin

    monkeypatch.setattr(devctl.admin, "_stdin_is_tty", lambda: True)
    name = unique("pia")
    _onboarded(users, name)
    result = admin("offboard", name, "--delete-data", input=answer)
    assert f"dev-{name}" in result.stderr  # the prompt names what is lost
    obj = users.get(name)
    assert bool(obj["metadata"].get("deletionTimestamp")) is deleted
    assert (obj["spec"]["deletionPolicy"] == "Delete") is deleted
    assert result.exit_code == (0 if deleted else 1)
    _release(users, name)


def test_offboard_wait_until_the_finalizer_is_done(admin, users):
    name = unique("quinn")
    _onboarded(users, name)

    def operator():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not users.get(name)["metadata"].get("deletionTimestamp"):
            time.sleep(0.02)
        time.sleep(0.1)
        _release(users, name)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    result = admin("offboard", name, "--wait", "--timeout", "20s")
    thread.join(5)
    assert result.exit_code == 0, result.stderr
    assert f"devuser/{name} deleted" in result.stderr
    assert not users.exists(name)


def test_offboard_unknown_user(admin, users):
    assert _error(admin("offboard", "nobody-here")) == 'error: devuser "nobody-here" not found'


# -- users --------------------------------------------------------------------------------------

def test_users_lists_devusers(admin, users):
    name = unique("rita")
    users.create(name, f"{name}@example.com", quota={"gpus": 8, "flavors": [{"name": "gpu-h100-8", "gpus": 16}]})
    users.ready(name, kueue=True)
    items = as_json(admin("users", "-o", "json"))["items"]
    mine = [o for o in items if o["metadata"]["name"] == name]
    assert len(mine) == 1 and mine[0]["spec"]["email"] == f"{name}@example.com"
    table = admin("users")
    assert table.exit_code == 0
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["NAME", "EMAIL", "NAMESPACE", "GPUS", "QUEUE", "PHASE", "AGE"]
    row = next(r for r in rows if r.startswith(name + " "))
    assert f"dev-{name}" in row and "8 (gpu-h100-8=16)" in row and "Active" in row


def test_users_shows_long_emails_whole(admin, users):
    name = unique("ursula")
    email = f"{name}.maximiliane.von-und-zu-lang@research.example-university.edu"  # over 40 characters
    users.create(name, email)
    users.ready(name, kueue=False)
    row = next(r for r in admin("users").stdout.splitlines() if r.startswith(name + " "))
    assert row.split()[1] == email


@pytest.mark.parametrize("args", [("onboard", "bob", "--email", "bob@example.com"), ("users",),
                                  ("offboard", "bob", "--yes")], ids=["onboard", "users", "offboard"])
def test_a_user_without_devuser_rights_is_told_to_ask_a_cluster_admin(sim, users, tmp_path, args):
    """A plain user (config/rbac devserver-user: no DevUser reads or writes) running devctl
    admin: one line that names the refusal and what to do (tests/real/test_rbac_matrix_real.py
    runs it with a user's certificate against kube-apiserver)."""
    from devuser_helpers import GET_DEVUSER, LIST_DEVUSERS, ApiProxy

    user_info = {"username": "jane@example.com", "groups": ["system:authenticated"]}
    with ApiProxy(sim.url, user_info, {LIST_DEVUSERS, GET_DEVUSER}) as proxy:
        result = invoke(["--kubeconfig", str(proxy.kubeconfig(sim, tmp_path / "kc")), "admin", *args])
    assert result.exit_code == 1 and proxy.forbidden_hits == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: forbidden: ") and line.endswith(
        f"; 'devctl admin {args[0]}' needs a cluster admin's credentials (DevUsers are cluster-scoped): "
        "ask a cluster admin to run it"), line
