"""What a user and the operator may and may not do, asked of a real kube-apiserver (issue 26.4).

The cluster gets what production installs: `kubectl kustomize config/default` (the CRDs, the
operator's ServiceAccount, ClusterRoles and bindings; not its Deployment: no operator runs),
`config/admission`, and the Kueue CRDs the roles use (third_party/kueue-v0.19.2; Kueue itself
does not run). Two DevUsers (the samples jane and ada) are created, and their namespaces get
exactly what the devuser role renders for them (hack/render_manifests.py runs the role's
normalize.yml and render.yml; nothing here copies its YAML): the namespace, the RoleBinding
devserver-user to the users' ClusterRole, quota, limits, NetworkPolicies, the shared claim and
the SSH keys' Secret.

The credentials are minted by hack/cluster: a client certificate for jane@example.com (bound in
dev-jane by that RoleBinding), one for mallory@example.com (bound nowhere), and a bound token of
the operator's ServiceAccount (config/default's). Each row of MATRIX is one
`kubectl auth can-i` (the real kubectl, a SelfSubjectAccessReview with those credentials):
who, verb, resource[/subresource][:name], namespace, and the answer config/rbac and
docs/security.md ("Isolation between users", "Operator RBAC") promise. can-i asks RBAC only:
a pod or claim a user may create is still confined by config/admission's policies
(tests/real/test_cluster_real.py creates them as the user) and by the namespace's quota.

Then devctl runs as jane against that API server (no operator, so only what needs no
reconcile): whoami, flavors, create, list, get, usage, delete, each read as JSON; and devctl
refuses, in one line that says what to do, what jane may not do (onboarding a user, another
user's namespace).

No kubesim twin: kubesim does not enforce RBAC (every request is allowed; tests/security/
test_isolation.py and test_admission.py evaluate the same RBAC with an authorizer of their own).
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import subprocess
from typing import NamedTuple

import pytest
import yaml

from hack import render_manifests
from hack.render_cases import flavors

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
DEVCTL = ROOT / ".venv" / "bin" / "devctl"
KUEUE_CRDS = [ROOT / "third_party" / "kueue-v0.19.2" / f"kueue.x-k8s.io_{plural}.yaml"
              for plural in ("clusterqueues", "localqueues", "resourceflavors", "workloads",
                             "workloadpriorityclasses")]
SAMPLES = ROOT / "config" / "samples"
USERS = {"jane": "torchdev_v1alpha1_devuser.yaml", "ada": "torchdev_v1alpha1_devuser_gpu.yaml"}
JANE, ADA = "dev-jane", "dev-ada"
ALL = "*"  # kubectl auth can-i -A: every namespace
GROUP = "torchdev.io"


class Row(NamedTuple):
    who: str        # jane (bound in dev-jane), mallory (bound nowhere), operator
    verb: str
    resource: str   # resource[.group][/subresource][:name]
    namespace: str | None  # None: cluster scope; ALL: -A
    yes: bool

    @property
    def id(self) -> str:
        where = {None: "cluster", ALL: "all-namespaces"}.get(self.namespace, self.namespace)
        return f"{self.who}-{'may' if self.yes else 'may-not'}-{self.verb}-{self.resource}-in-{where}"


def rows(who: str, verbs: str, resources: str, namespace: str | None, yes: bool) -> list[Row]:
    return [Row(who, v, r, namespace, yes) for r in resources.split() for v in verbs.split()]


JOBS = "devservers trainingjobs ephemeralaccelerationjobs"

MATRIX: list[Row] = [
    # --- jane in her namespace: devserver_user_role.yaml ---------------------------------------
    *rows("jane", "create get list watch patch update delete deletecollection", JOBS, JANE, True),
    *rows("jane", "get", "devservers/status trainingjobs/status ephemeralaccelerationjobs/status", JANE, True),
    # the operator writes the status (phase, the reservation, the trainer's run): never the user
    *rows("jane", "patch update", "devservers/status trainingjobs/status ephemeralaccelerationjobs/status",
          JANE, False),
    Row("jane", "update", "devservers/finalizers", JANE, False),
    # billing: a user reads her usage records and can neither write nor delete one
    *rows("jane", "get list watch", "usagerecords", JANE, True),
    *rows("jane", "create update patch delete deletecollection", "usagerecords", JANE, False),
    Row("jane", "update", "usagerecords/status", JANE, False),
    # her SSH keys' Secret and every other Secret: not even readable
    *rows("jane", "get list watch create", "secrets", JANE, False),
    Row("jane", "get", "secrets:ssh-public-keys", JANE, False),
    # pods: read, logs, exec, port-forward; create and delete for devctl infer's helper pods
    # (RBAC admits any pod: config/admission's user-pods policy admits only the helper's shape)
    *rows("jane", "get list watch create delete", "pods", JANE, True),
    *rows("jane", "patch update", "pods", JANE, False),
    Row("jane", "get", "pods/log", JANE, True),
    *rows("jane", "create", "pods/exec pods/portforward", JANE, True),
    *rows("jane", "create", "pods/attach pods/eviction pods/binding", JANE, False),
    Row("jane", "patch", "pods/ephemeralcontainers", JANE, False),
    # volumes: read, delete (devctl delete --purge), create and patch for devctl infer's
    # artifacts-<job> (config/admission's user-volumes policy admits that claim only)
    *rows("jane", "get list create patch delete", "persistentvolumeclaims", JANE, True),
    Row("jane", "update", "persistentvolumeclaims", JANE, False),
    # what the operator manages there: readable or not, never writable
    *rows("jane", "get list", "services statefulsets.apps resourcequotas limitranges events", JANE, True),
    *rows("jane", "create patch delete", "services statefulsets.apps resourcequotas limitranges", JANE, False),
    Row("jane", "create", "events", JANE, False),
    *rows("jane", "get create patch delete", "configmaps networkpolicies.networking.k8s.io serviceaccounts", JANE,
          False),
    Row("jane", "create", "serviceaccounts/token", JANE, False),  # no trainer or agent token
    *rows("jane", "get create delete", "rolebindings.rbac.authorization.k8s.io roles.rbac.authorization.k8s.io",
          JANE, False),
    # no way around the DevServer/TrainingJob (and their queue and usage records)
    *rows("jane", "create", "jobs.batch deployments.apps replicasets.apps daemonsets.apps", JANE, False),
    # her namespace: readable (devctl whoami), its labels and existence not hers to change
    # (the torchdev.io/user label is what config/admission's bindings select)
    Row("jane", "get", f"namespaces:{JANE}", JANE, True),
    *rows("jane", "patch update delete", f"namespaces:{JANE}", JANE, False),
    # Kueue: her queue and workloads, read only
    *rows("jane", "get list", "localqueues.kueue.x-k8s.io workloads.kueue.x-k8s.io", JANE, True),
    *rows("jane", "create patch delete", "localqueues.kueue.x-k8s.io workloads.kueue.x-k8s.io", JANE, False),
    # --- jane elsewhere: nothing in another user's namespace, cluster-wide the flavors only ----
    *rows("jane", "get list create patch delete", "devservers usagerecords", ADA, False),
    *rows("jane", "get list", "pods secrets persistentvolumeclaims", ADA, False),
    Row("jane", "create", "pods/exec", ADA, False),
    Row("jane", "get", f"namespaces:{ADA}", ADA, False),
    *rows("jane", "list", "devservers usagerecords pods", ALL, False),
    *rows("jane", "list", "pods secrets", "torchdev-system", False),
    *rows("jane", "get list watch", "devserverflavors", None, True),
    *rows("jane", "create patch delete", "devserverflavors", None, False),
    *rows("jane", "get list create patch delete", "devusers", None, False),
    *rows("jane", "create", "clusterqueues.kueue.x-k8s.io resourceflavors.kueue.x-k8s.io namespaces "
          "clusterroles.rbac.authorization.k8s.io clusterrolebindings.rbac.authorization.k8s.io "
          "customresourcedefinitions.apiextensions.k8s.io", None, False),
    *rows("jane", "list", "namespaces nodes persistentvolumes", None, False),
    Row("jane", "bind", "clusterroles.rbac.authorization.k8s.io:torchdev-devserver-user", None, False),
    Row("jane", "impersonate", "users", None, False),
    *rows("jane", "delete", "validatingadmissionpolicies.admissionregistration.k8s.io "
          "validatingadmissionpolicybindings.admissionregistration.k8s.io", None, False),
    Row("jane", "create", "selfsubjectreviews.authentication.k8s.io", None, True),  # devctl whoami
    # --- mallory: authenticated, bound nowhere ----------------------------------------------------
    *rows("mallory", "get list create", "devservers usagerecords pods", JANE, False),
    Row("mallory", "get", f"namespaces:{JANE}", JANE, False),
    *rows("mallory", "get list", "devserverflavors", None, True),  # the catalogue: system:authenticated
    *rows("mallory", "get create", "devusers", None, False),
    # --- the operator (config/rbac/role.yaml, leader_election_role.yaml) ---------------------------
    # its primaries, cluster-wide: read, annotate, finalizers, status; never create or delete them
    *rows("operator", "get list watch patch update", "devservers", ALL, True),
    *rows("operator", "create delete", "devservers trainingjobs ephemeralaccelerationjobs", ALL, False),
    *rows("operator", "get list watch update", "devusers", None, True),
    *rows("operator", "create delete patch", "devusers", None, False),
    *rows("operator", "get list watch", "devserverflavors trainingjobs ephemeralaccelerationjobs", ALL, True),
    *rows("operator", "create patch delete", "devserverflavors", None, False),
    Row("operator", "patch", "trainingjobs", ALL, True),          # the run's annotation torchdev.io/run
    Row("operator", "patch", "ephemeralaccelerationjobs", ALL, False),
    *rows("operator", "patch update", "devservers/status devusers/status devserverflavors/status "
          "trainingjobs/status ephemeralaccelerationjobs/status", ALL, True),
    *rows("operator", "update", "devservers/finalizers devusers/finalizers trainingjobs/finalizers "
          "ephemeralaccelerationjobs/finalizers", ALL, True),
    # usage records: written once (server-side apply), pruned after retention; never rewritten
    *rows("operator", "get list create patch delete", "usagerecords", JANE, True),
    *rows("operator", "update watch", "usagerecords", JANE, False),
    # what the roles render (roles/*/templates) and prune
    *rows("operator", "get create patch delete", "statefulsets.apps services configmaps jobs.batch "
          "networkpolicies.networking.k8s.io rolebindings.rbac.authorization.k8s.io "
          "roles.rbac.authorization.k8s.io serviceaccounts", JANE, True),
    *rows("operator", "update", "statefulsets.apps services configmaps jobs.batch", JANE, False),
    *rows("operator", "create", "deployments.apps daemonsets.apps cronjobs.batch", JANE, False),
    *rows("operator", "get create patch delete", "pods", JANE, True),  # the EAJ's inference pod
    *rows("operator", "update", "pods", JANE, False),
    *rows("operator", "create", "pods/exec pods/eviction serviceaccounts/token", JANE, False),
    Row("operator", "get", "pods/log", JANE, False),
    *rows("operator", "get list create patch delete", "persistentvolumeclaims", JANE, True),
    # the DevUser's namespace (deletionPolicy Delete deletes it) and its quota, limits, keys
    *rows("operator", "get create patch delete", "namespaces", None, True),
    *rows("operator", "update", "namespaces namespaces/finalize", None, False),
    *rows("operator", "create patch", "resourcequotas limitranges secrets", JANE, True),
    *rows("operator", "delete update", "resourcequotas limitranges secrets", JANE, False),
    # Secrets are read cluster-wide (ansible-operator's informer cache serves the devuser role's
    # GET of ssh-public-keys), kube-system's included: docs/security.md says so
    *rows("operator", "get list watch", "secrets", ALL, True),
    Row("operator", "get", "secrets", "kube-system", True),
    # RBAC cannot confine these to the users' namespaces (no label selectors): the operator may
    # delete any namespace (deletionPolicy Delete), and create pods and Secrets in any namespace
    Row("operator", "delete", "namespaces:kube-system", "kube-system", True),
    *rows("operator", "create", "pods secrets rolebindings.rbac.authorization.k8s.io", "kube-system", True),
    # binding the users' ClusterRole without holding it, and no other
    Row("operator", "bind", "clusterroles.rbac.authorization.k8s.io:torchdev-devserver-user", None, True),
    *rows("operator", "bind", "clusterroles.rbac.authorization.k8s.io:cluster-admin "
          "clusterroles.rbac.authorization.k8s.io:torchdev-manager-role clusterroles.rbac.authorization.k8s.io:admin",
          None, False),
    *rows("operator", "escalate", "roles.rbac.authorization.k8s.io clusterroles.rbac.authorization.k8s.io",
          ALL, False),
    *rows("operator", "create", "clusterroles.rbac.authorization.k8s.io "
          "clusterrolebindings.rbac.authorization.k8s.io customresourcedefinitions.apiextensions.k8s.io "
          "mutatingwebhookconfigurations.admissionregistration.k8s.io "
          "certificatesigningrequests.certificates.k8s.io", None, False),
    *rows("operator", "delete patch", "validatingadmissionpolicies.admissionregistration.k8s.io "
          "validatingadmissionpolicybindings.admissionregistration.k8s.io", None, False),
    *rows("operator", "list patch", "nodes", None, False),
    Row("operator", "delete", "persistentvolumes", None, False),
    # the devserver role reads its home claims' StorageClass by name (may they grow?), nothing more
    Row("operator", "get", "storageclasses.storage.k8s.io", None, True),
    *rows("operator", "list watch patch", "storageclasses.storage.k8s.io", None, False),
    Row("operator", "impersonate", "users", None, False),
    # Kueue: the per-user ClusterQueue and LocalQueue, a ResourceFlavor per flavor (never deleted
    # by the operator: the garbage collector does), Workloads read only
    *rows("operator", "create patch delete", "clusterqueues.kueue.x-k8s.io", None, True),
    *rows("operator", "create patch delete", "localqueues.kueue.x-k8s.io", JANE, True),
    *rows("operator", "create patch", "resourceflavors.kueue.x-k8s.io", None, True),
    Row("operator", "delete", "resourceflavors.kueue.x-k8s.io", None, False),
    *rows("operator", "list watch", "workloads.kueue.x-k8s.io", ALL, True),
    *rows("operator", "patch delete", "workloads.kueue.x-k8s.io", ALL, False),
    # the exporter's scrape authentication, and leader election in its own namespace only
    *rows("operator", "create", "tokenreviews.authentication.k8s.io "
          "subjectaccessreviews.authorization.k8s.io", None, True),
    *rows("operator", "get create update", "leases.coordination.k8s.io", "torchdev-system", True),
    *rows("operator", "delete", "leases.coordination.k8s.io", "torchdev-system", False),
    *rows("operator", "create", "leases.coordination.k8s.io", JANE, False),
    Row("operator", "create", "events", JANE, True),
]


# --- the cluster ----------------------------------------------------------------------------------

def kubectl(kubeconfig, *args, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, check=check, timeout=120)


def apply(kubeconfig, objects: list[dict], manager: str = "torchdev-tests") -> None:
    kubectl(kubeconfig, "apply", "--server-side", f"--field-manager={manager}", "-f", "-",
            stdin=yaml.safe_dump_all(objects))


@pytest.fixture(scope="module")
def cluster(real_cluster, tmp_path_factory):
    """The installed cluster: {"admin", "jane", "mallory", "operator": kubeconfig paths}."""
    cp = real_cluster
    admin = cp.kubeconfig
    default = [o for o in render_manifests.kustomize("default") if o["kind"] != "Deployment"]
    apply(admin, default + render_manifests.kustomize("admission"))
    for crd in KUEUE_CRDS:
        kubectl(admin, "apply", "--server-side", "-f", str(crd))
    kubectl(admin, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all")
    for path in sorted(SAMPLES.glob("*devserverflavor*.yaml")):
        kubectl(admin, "apply", "--server-side", "--field-manager=torchdev-tests", "-f", str(path))

    # The DevUsers, as an admin onboards them, and what the devuser role renders for them (with
    # their real uids: the RoleBinding is owned by its DevUser)
    for path in USERS.values():
        kubectl(admin, "apply", "--server-side", "--field-manager=devctl", "-f", str(SAMPLES / path))
    users = {u["metadata"]["name"]: u for u in json.loads(kubectl(admin, "get", "devusers", "-o", "json").stdout)["items"]}
    hostvars = {name: render_manifests.devuser_hostvars({"cr": users[name], "kueue": False, "flavors": flavors()})
                for name in USERS}
    rendered = render_manifests.render_roles(tmp_path_factory.mktemp("render"), {"devuser": hostvars})["devuser"]
    (operator_sa,) = [o for o in default if o["kind"] == "ServiceAccount"]
    users_role = {o["metadata"]["name"] for o in default if o["kind"] == "ClusterRole"}
    for name, objects in rendered.items():
        (binding,) = [o for o in objects if o["kind"] == "RoleBinding"]
        # the role binds the ClusterRole config/default installs, to the DevUser's e-mail
        assert binding["roleRef"]["name"] in users_role, (binding["roleRef"], users_role)
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                        "name": users[name]["spec"]["email"]}]

    cp.wait_quota_counts(f"count/devservers.{GROUP}")
    for objects in rendered.values():
        apply(admin, objects, manager="torchdev-operator")
    namespace, sa = operator_sa["metadata"]["namespace"], operator_sa["metadata"]["name"]
    assert (namespace, sa) == ("torchdev-system", "torchdev-controller-manager")
    yield {"admin": admin, "jane": cp.user_kubeconfig("jane@example.com"),
           "mallory": cp.user_kubeconfig("mallory@example.com"),
           "operator": cp.service_account_kubeconfig(namespace, sa)}
    # The control plane is the process's: the DevUsers go (their objects, owned by them, with them),
    # so a later module's operator does not make their queues (Kueue would lend their quota).
    kubectl(admin, "delete", "devusers", *USERS, "--wait=false")


# --- the matrix -----------------------------------------------------------------------------------

def can_i(kubeconfig, row: Row) -> tuple[bool, str]:
    """kubectl auth can-i for a row: (the answer, kubectl's warnings)."""
    resource, _, name = row.resource.partition(":")
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", row.verb, f"{resource}/{name}" if name else resource]
    if sub:
        args.append(f"--subresource={sub}")
    if row.namespace == ALL:
        args.append("--all-namespaces")
    elif row.namespace:
        args += ["-n", row.namespace]
    proc = kubectl(kubeconfig, *args, check=False)
    assert proc.returncode in (0, 1) and proc.stdout.strip() in ("yes", "no"), (args, proc.stdout, proc.stderr)
    return proc.stdout.strip() == "yes", proc.stderr.strip()


@pytest.fixture(scope="module")
def answers(cluster):
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {row: pool.submit(can_i, cluster[row.who], row) for row in MATRIX}
        return {row: f.result() for row, f in futures.items()}


def test_the_matrix_is_large_and_has_no_duplicate_rows():
    keys = [row[:4] for row in MATRIX]
    assert len(set(keys)) == len(keys), [k for k in keys if keys.count(k) > 1]
    assert len(MATRIX) >= 50
    assert {row.who for row in MATRIX} == {"jane", "mallory", "operator"}


@pytest.mark.parametrize("row", MATRIX, ids=[row.id for row in MATRIX])
def test_can_i(answers, row):
    yes, warnings = answers[row]
    # a misspelt resource or group would answer "no" for the wrong reason: kubectl must know it
    # (cluster-scoped kinds: kubectl only says that a namespace does not apply to them)
    for line in filter(None, warnings.splitlines()):
        assert "is not namespace scoped" in line, (row, warnings)
    assert yes == row.yes, f"{row.who} {'may not' if row.yes else 'may'} {row.verb} {row.resource} " \
                           f"in {row.namespace or 'the cluster scope'}"


# --- devctl as jane -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def devctl(cluster, tmp_path_factory):
    """devctl with jane's certificate: a fresh HOME and config, no git e-mail."""
    home = tmp_path_factory.mktemp("jane-home")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "XDG_CONFIG_HOME")}
    env.update(HOME=str(home), USER="jane", KUBECONFIG=str(cluster["jane"]),
               DEVCTL_CONFIG=str(home / "devctl.yaml"), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")

    def run(*args, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(DEVCTL), *args], cwd=home, env=env, capture_output=True, text=True, timeout=120)
        assert (proc.returncode == 0) == ok, (args, proc.returncode, proc.stdout, proc.stderr)
        return proc

    run("config", "set-namespace", JANE)
    run("config", "set-owner", "jane@example.com")
    return run


def test_devctl_as_jane(cluster, devctl, tmp_path):
    me = json.loads(devctl("whoami", "-o", "json").stdout)
    assert (me["username"], me["groups"], me["source"]) == ("jane@example.com", ["system:authenticated"],
                                                             "SelfSubjectReview")
    # a user may not read DevUsers (cluster-scoped): devctl finds hers by her namespace's label
    assert (me["namespace"], me["devUser"], me["devUserReadable"]) == (JANE, "jane", False)

    catalogue = json.loads(devctl("flavors", "-o", "json").stdout)
    assert "cpu-small" in {f["metadata"]["name"] for f in catalogue["items"]}

    key = tmp_path / "id_ed25519.pub"
    key.write_text(yaml.safe_load((SAMPLES / USERS["jane"]).read_text())["spec"]["sshPublicKeys"][0] + "\n")
    created = json.loads(devctl("create", "my-dev", "--flavor", "cpu-small", "--ssh-key-file", str(key),
                                "-o", "json").stdout)
    assert (created["metadata"]["namespace"], created["spec"]["owner"]) == (JANE, "jane@example.com")
    assert [d["metadata"]["name"] for d in json.loads(devctl("list", "-o", "json").stdout)["items"]] == ["my-dev"]
    got = json.loads(devctl("get", "my-dev", "-o", "json").stdout)
    assert (got["kind"], got["metadata"]["uid"]) == ("DevServer", created["metadata"]["uid"])

    # the operator writes a usage record (its token: it may), jane reads it
    record = yaml.safe_load((SAMPLES / "torchdev_v1alpha1_usagerecord.yaml").read_text())
    assert record["metadata"]["namespace"] == JANE
    apply(cluster["operator"], [record], manager="torchdev-operator")
    usage = json.loads(devctl("usage", "--since", "0", "-o", "json").stdout)
    assert (usage["namespace"], usage["records"]) == (JANE, 1)
    assert [(u["user"], u["gpuHours"]) for u in usage["byUser"]] == [("jane@example.com", record["spec"]["gpuHours"])]

    devctl("delete", "my-dev", "--wait", "--timeout", "60s")  # no operator: no finalizer holds it
    assert json.loads(devctl("list", "-o", "json").stdout)["items"] == []


@pytest.mark.parametrize("args,names", [
    (("admin", "onboard", "bob", "--email", "bob@example.com"), ("devusers", "cluster admin")),
    (("admin", "users"), ("devusers", "cluster admin")),
    (("-n", ADA, "list"), ("devservers", ADA)),
], ids=["onboard", "users", "another-namespace"])
def test_devctl_refuses_what_jane_may_not_do(devctl, args, names):
    proc = devctl(*args, ok=False)
    assert proc.returncode == 1 and proc.stdout == "", proc
    (line,) = proc.stderr.splitlines()  # one line
    assert line.startswith("error: forbidden: ") and 'User "jane@example.com" cannot' in line, line
    for text in names:
        assert text in line, line
