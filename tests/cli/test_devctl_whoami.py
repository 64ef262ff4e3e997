"""devctl whoami against kubesim.

kubesim does not serve authentication.k8s.io SelfSubjectReview (whoami falls back to the kube
context's user). For the SelfSubjectReview path and for users who may not list DevUsers, a small
HTTP proxy in front of kubesim answers SelfSubjectReviews with a given userInfo and 403s the
requests a non-admin could not make; everything else reaches kubesim.
"""
from __future__ import annotations

from devctl_helpers import as_json, invoke, unique
from devuser_helpers import GET_DEVUSER, LIST_DEVUSERS, ApiProxy


def _devuser(users, name, *, kueue=True, **spec):
    users.create(name, f"{name}@example.com", **spec)
    users.ready(name, kueue=kueue)
    return name


def _whoami(sim, *args, kubeconfig=None):
    return invoke(["--kubeconfig", kubeconfig or sim.kubeconfig, "whoami", *args])


def test_whoami_finds_my_devuser_by_owner_email(sim, users):
    name = _devuser(users, unique("alice"), quota={"gpus": 8})
    assert invoke(["config", "set-owner", f"{name}@example.com"]).exit_code == 0
    me = as_json(_whoami(sim, "-o", "json"))
    assert me["source"] == "kubeconfig" and me["username"] == "kubesim-admin"
    assert me["context"] == "kubesim"
    assert me["devUser"] == name and me["foundBy"] == "email"
    assert me["email"] == f"{name}@example.com"
    assert me["namespace"] == f"dev-{name}"
    assert me["queue"] == "torchdev" and me["clusterQueue"] == f"torchdev-{name}" and me["kueue"] is True
    assert me["quota"]["gpus"] == 8 and me["quota"]["storage"] == "2Ti"
    assert me["phase"] == "Active"


def test_whoami_finds_my_devuser_by_namespace(sim, users):
    name = _devuser(users, unique("bob"), kueue=False)
    me = as_json(_whoami(sim, "-n", f"dev-{name}", "-o", "json"))
    assert me["devUser"] == name and me["foundBy"] == "namespace"
    assert me["queue"] is None and me["kueue"] is False


def test_whoami_table(sim, users):
    name = _devuser(users, unique("carol"), quota={"gpus": 4, "flavors": [{"name": "gpu-h100-8", "gpus": 16}]})
    result = invoke(["--kubeconfig", sim.kubeconfig, "whoami", "-n", f"dev-{name}"])
    assert result.exit_code == 0, result.stderr
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert fields["User"] == "kubesim-admin (kubeconfig context user)"
    assert fields["DevUser"] == name and fields["Namespace"] == f"dev-{name}"
    assert fields["Queue"] == f"torchdev (ClusterQueue torchdev-{name})"
    assert fields["Quota"].startswith("4 GPUs, 64 CPU, 256Gi memory per flavor; gpu-h100-8: 16 GPUs")


def test_whoami_without_devuser_warns_and_exits_0(sim, users):
    result = invoke(["--kubeconfig", sim.kubeconfig, "-n", "dev-nobody-at-all", "whoami", "-o", "json"])
    me = as_json(result)
    assert me["devUser"] is None and me["namespace"] == "dev-nobody-at-all"
    assert "no DevUser found" in result.stderr and "devctl admin onboard" in result.stderr


# -- through a proxy: SelfSubjectReview, and a user who may not list DevUsers ---------------------

def test_whoami_uses_self_subject_review_and_finds_devuser_by_its_email(sim, users, tmp_path):
    name = _devuser(users, unique("dave"))
    user_info = {"username": f"{name}@example.com", "groups": ["system:authenticated", "ml-team"]}
    with ApiProxy(sim.url, user_info, set()) as proxy:
        me = as_json(_whoami(sim, "-o", "json", kubeconfig=proxy.kubeconfig(sim, tmp_path / "kc")))
    assert proxy.reviews and proxy.reviews[0]["kind"] == "SelfSubjectReview"
    assert me["source"] == "SelfSubjectReview"
    assert me["username"] == f"{name}@example.com"
    assert me["groups"] == ["system:authenticated", "ml-team"]
    assert me["devUser"] == name and me["foundBy"] == "email"


def test_whoami_when_devusers_may_not_be_listed(sim, users, tmp_path):
    """No list on the cluster-scoped DevUsers: devctl reads its own by name."""
    name = _devuser(users, unique("erin"))
    user_info = {"username": f"{name}@example.com", "groups": ["system:authenticated"]}
    with ApiProxy(sim.url, user_info, {LIST_DEVUSERS}) as proxy:
        me = as_json(_whoami(sim, "-o", "json", kubeconfig=proxy.kubeconfig(sim, tmp_path / "kc")))
    assert proxy.forbidden_hits == 1
    assert me["devUser"] == name and me["namespace"] == f"dev-{name}" and me["foundBy"] == "email"


def test_whoami_when_devusers_may_not_be_read_uses_the_namespace(sim, users, tmp_path):
    """A plain user (config/rbac devserver-user): no DevUser reads at all; the namespace's
    torchdev.io/user label and the LocalQueue tell who and which queue."""
    name = _devuser(users, unique("fay"))
    users.namespace(f"dev-{name}", labels={"torchdev.io/user": name})
    user_info = {"username": f"{name}@example.com", "groups": ["system:authenticated"]}
    with ApiProxy(sim.url, user_info, {LIST_DEVUSERS, GET_DEVUSER}) as proxy:
        result = _whoami(sim, "-n", f"dev-{name}", "-o", "json",
                         kubeconfig=proxy.kubeconfig(sim, tmp_path / "kc"))
    me = as_json(result)
    assert proxy.forbidden_hits >= 2  # the list and the reads by name
    assert me["devUser"] == name and me["foundBy"] == "namespace label"
    assert me["devUserReadable"] is False and me["email"] == f"{name}@example.com"
    assert me["kueue"] is False and me["queue"] is None  # kubesim without Kueue
    assert "warning" not in result.stderr


def test_whoami_forbidden_and_not_a_user_namespace_says_so(sim, users, tmp_path):
    with ApiProxy(sim.url, {"username": "x@example.com"}, {LIST_DEVUSERS, GET_DEVUSER}) as proxy:
        result = _whoami(sim, "-n", "default", "-o", "json", kubeconfig=proxy.kubeconfig(sim, tmp_path / "kc"))
    me = as_json(result)
    assert me["devUser"] is None and me["devUserReadable"] is False
    assert "may not read DevUsers" in result.stderr
