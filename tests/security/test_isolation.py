"""Isolation between users, from what the roles really render (hack/render_manifests.py) and
what `make deploy` installs (config/default):

* RBAC: an authorizer over the deployed ClusterRoles/ClusterRoleBindings and the RoleBindings
  the devuser role renders: user A has no access at all in user B's namespace, the intended
  access in their own, and nothing cluster-wide but reading the flavor catalogue.
* NetworkPolicy: the rendered policies evaluated with their podSelector / namespaceSelector /
  ipBlock / ports semantics (selectors: kubesim.selectors.LabelSelector): a user's pods reach
  each other (torch.distributed 29500-29510), another user's pods do not, SSH (2222) only from
  the user's sshAllowedCIDRs.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pytest

from _rbac import Access, allows, registry
from kubeselect import LabelSelector

REG = registry()
JANE, ADA, NOSSH = "jane-plain", "ada-plain", "nossh-plain"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


# --- RBAC ----------------------------------------------------------------------------------

class Authorizer:
    """Kubernetes RBAC: a request is allowed when a (Cluster)RoleBinding for the user (or one of
    their groups) grants it; RoleBindings only in their own namespace."""

    def __init__(self, objects):
        self.roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o.get("rules") or []
                      for o in objects if o["kind"] in ("Role", "ClusterRole")}
        self.bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]

    def rules_for(self, user: str, groups: tuple[str, ...], namespace: str | None):
        for b in self.bindings:
            ns = b["metadata"].get("namespace", "")
            if b["kind"] == "RoleBinding" and ns != namespace:
                continue
            if not any((s["kind"] == "User" and s["name"] == user) or (s["kind"] == "Group" and s["name"] in groups)
                       for s in b.get("subjects") or []):
                continue
            ref = b["roleRef"]
            key = (ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"])
            assert key in self.roles, "%s %s binds %s, which does not exist" % (b["kind"], b["metadata"]["name"], key)
            yield from self.roles[key]

    def allowed(self, user, access: Access, namespace: str | None, groups=("system:authenticated",)) -> bool:
        return allows(self.rules_for(user, groups, namespace), access)


def _universe(authorizer) -> set[Access]:
    """Every resource the cluster serves (built in, ours, Kueue's) and every resource a deployed
    role names (subresources, not-yet-served kinds), with every verb."""
    resources = {(rt.group, rt.plural, rt.namespaced) for rt in REG.all()}
    for rules in authorizer.roles.values():
        for rule in rules:
            for group in rule.get("apiGroups") or []:
                for res in rule.get("resources") or []:
                    if group != "*" and "*" not in res:
                        resources.add((group, res, True))
    verbs = VERBS + ("bind", "escalate", "impersonate")
    return {Access(g, r, v) for g, r, _ in resources for v in verbs}, {(g, r) for g, r, namespaced in resources if not namespaced}


@pytest.fixture(scope="module")
def authz(rendered, deployed):
    users = [o for case in (JANE, ADA) for o in rendered["devuser"][case]]
    return Authorizer(list(deployed) + users)


def _user(rendered, case):
    (rb,) = [o for o in rendered["devuser"][case] if o["kind"] == "RoleBinding"]
    (ns,) = [o for o in rendered["devuser"][case] if o["kind"] == "Namespace"]
    (subject,) = rb["subjects"]
    assert subject["kind"] == "User"
    return subject["name"], ns["metadata"]["name"]


def test_rolebinding_binds_the_deployed_user_role_to_the_email(rendered, deployed):
    user, namespace = _user(rendered, JANE)
    assert user == "jane@example.com" and namespace == "dev-jane"
    (rb,) = [o for o in rendered["devuser"][JANE] if o["kind"] == "RoleBinding"]
    assert rb["metadata"]["namespace"] == namespace
    assert any(o["kind"] == "ClusterRole" and o["metadata"]["name"] == rb["roleRef"]["name"] for o in deployed)


def test_user_has_no_access_in_another_users_namespace(authz, rendered):
    jane, jane_ns = _user(rendered, JANE)
    ada, ada_ns = _user(rendered, ADA)
    universe, cluster_scoped = _universe(authz)
    namespaced = [a for a in universe if (a.group, a.resource.split("/")[0]) not in cluster_scoped]
    for user, other in ((jane, ada_ns), (ada, jane_ns)):
        leaks = sorted(str(a) for a in namespaced if authz.allowed(user, a, other))
        assert not leaks, "%s may in %s: %s" % (user, other, leaks)


OWN_ALLOWED = [
    Access("torchdev.io", "devservers", v) for v in ("get", "list", "watch", "create", "patch", "delete")] + [
    Access("", "pods", "get"), Access("", "pods/log", "get"), Access("", "pods/exec", "create"),
    Access("", "pods/portforward", "create"), Access("", "events", "list"), Access("", "services", "get"),
    Access("apps", "statefulsets", "get"), Access("", "persistentvolumeclaims", "delete"),
    Access("", "resourcequotas", "get"), Access("", "namespaces", "get"),
    # devctl infer: the job's volume and the helper pods that move files in and out of it
    Access("", "persistentvolumeclaims", "create"), Access("", "persistentvolumeclaims", "patch"),
    Access("", "pods", "create"), Access("", "pods", "delete"),
] + [Access("torchdev.io", "usagerecords", v) for v in ("get", "list", "watch")]
OWN_DENIED = [
    Access("", "secrets", "get"), Access("", "secrets", "list"),       # the ssh-public-keys Secret
    Access("", "pods", "update"), Access("", "pods", "patch"),          # no changing the operator's pods
    Access("apps", "statefulsets", "patch"), Access("", "services", "create"), Access("", "configmaps", "patch"),
    Access("", "persistentvolumeclaims", "update"), Access("", "resourcequotas", "patch"),
    Access("", "limitranges", "delete"), Access("networking.k8s.io", "networkpolicies", "delete"),
    Access("rbac.authorization.k8s.io", "rolebindings", "create"), Access("", "namespaces", "delete"),
    Access("kueue.x-k8s.io", "localqueues", "patch"), Access("torchdev.io", "devservers/status", "patch"),
    Access("", "serviceaccounts", "create"), Access("", "serviceaccounts/token", "create"),
] + [  # usage records: what their reservations used is the operator's to write, never the user's
    Access("torchdev.io", "usagerecords", v) for v in ("create", "update", "patch", "delete", "deletecollection")] + [
    Access("torchdev.io", "usagerecords/status", "update"), Access("torchdev.io", "usagerecords/status", "patch")]


@pytest.mark.parametrize("access", OWN_ALLOWED, ids=str)
def test_user_has_the_intended_access_in_their_namespace(authz, rendered, access):
    user, namespace = _user(rendered, JANE)
    assert authz.allowed(user, access, namespace)


@pytest.mark.parametrize("access", OWN_DENIED, ids=str)
def test_user_cannot_touch_what_the_operator_manages(authz, rendered, access):
    user, namespace = _user(rendered, JANE)
    assert not authz.allowed(user, access, namespace)


def test_nothing_cluster_wide_but_reading_flavors(authz, rendered):
    user, _ = _user(rendered, JANE)
    universe, _ = _universe(authz)
    cluster_wide = sorted(str(a) for a in universe if authz.allowed(user, a, None))
    assert cluster_wide == ["get devserverflavors.torchdev.io", "list devserverflavors.torchdev.io",
                            "watch devserverflavors.torchdev.io"]


# --- NetworkPolicy -------------------------------------------------------------------------

@dataclass
class Pod:
    namespace: str
    labels: dict[str, str]
    ip: str
    ports: dict[str, int] = field(default_factory=dict)  # named container ports


def _in_cidr(ip: str, block: dict) -> bool:
    addr = ipaddress.ip_address(ip)
    net = ipaddress.ip_network(block["cidr"])
    if addr.version != net.version or addr not in net:
        return False
    return not any(addr in ipaddress.ip_network(e) for e in block.get("except") or [] if ipaddress.ip_network(e).version == addr.version)


class Network:
    """NetworkPolicy ingress semantics (networking.k8s.io/v1): a pod selected by an Ingress policy
    of its namespace is isolated and accepts only what some selecting policy's rule allows."""

    def __init__(self, namespaces: dict[str, dict[str, str]], policies: list[dict]):
        self.namespaces, self.policies = namespaces, policies

    def _selects(self, policy, pod: Pod) -> bool:
        spec = policy["spec"]
        types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if spec.get("egress") else []))
        return (policy["metadata"]["namespace"] == pod.namespace and "Ingress" in types
                and LabelSelector.from_dict(spec.get("podSelector") or {}).matches(pod.labels))

    def _peer(self, peer, policy_ns: str, source: Pod | str) -> bool:
        if "ipBlock" in peer:
            return _in_cidr(source.ip if isinstance(source, Pod) else source, peer["ipBlock"])
        if not isinstance(source, Pod):
            return False  # pod and namespace selectors match pods only
        if "namespaceSelector" in peer:
            ns_ok = LabelSelector.from_dict(peer["namespaceSelector"]).matches(self.namespaces[source.namespace])
        else:
            ns_ok = source.namespace == policy_ns
        return ns_ok and LabelSelector.from_dict(peer.get("podSelector") or {}).matches(source.labels)

    @staticmethod
    def _port(rule_port, target: Pod, port: int, protocol: str) -> bool:
        if rule_port.get("protocol", "TCP") != protocol:
            return False
        if "port" not in rule_port:
            return True
        wanted = rule_port["port"]
        if isinstance(wanted, str):
            return target.ports.get(wanted) == port
        return wanted <= port <= rule_port.get("endPort", wanted)

    def allowed(self, source: Pod | str, target: Pod, port: int, protocol: str = "TCP") -> bool:
        selecting = [p for p in self.policies if self._selects(p, target)]
        if not selecting:
            return True
        for policy in selecting:
            for rule in policy["spec"].get("ingress") or []:
                peers, ports = rule.get("from"), rule.get("ports")
                if peers and not any(self._peer(p, policy["metadata"]["namespace"], source) for p in peers):
                    continue
                if ports and not any(self._port(p, target, port, protocol) for p in ports):
                    continue
                return True
        return False


@pytest.fixture(scope="module")
def network(rendered):
    objects = [o for case in (JANE, ADA, NOSSH) for o in rendered["devuser"][case]]
    namespaces = {o["metadata"]["name"]: dict(o["metadata"].get("labels") or {},
                                              **{"kubernetes.io/metadata.name": o["metadata"]["name"]})
                  for o in objects if o["kind"] == "Namespace"}
    return Network(namespaces, [o for o in objects if o["kind"] == "NetworkPolicy"])


@pytest.fixture(scope="module")
def pods(rendered):
    """Replicas of the rendered distributed DevServer, placed in jane's, ada's and nossh's
    namespaces.  Pod IPs come from a pod network outside every sshAllowedCIDRs (e.g. EKS
    custom networking, 100.64.0.0/10): an ipBlock also admits pods whose IPs it covers
    (docs/security.md)."""
    (sts,) = [o for o in rendered["devserver"]["ddp-smoke__gpu-a10g-1"] if o["kind"] == "StatefulSet"]
    template = sts["spec"]["template"]
    labels = template["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports") or []}
    assert ports["ssh"] == 2222 and ports["rdzv"] == 29500 and ports["nccl-10"] == 29510

    def pod(ns, i, ip):
        return Pod(ns, dict(labels, **{"apps.kubernetes.io/pod-index": str(i)}), ip, ports)
    return {"jane-0": pod("dev-jane", 0, "100.64.1.10"), "jane-1": pod("dev-jane", 1, "100.64.1.11"),
            "ada-0": pod("dev-ada", 0, "100.64.2.10"), "nossh-0": pod("dev-nossh", 0, "100.64.3.10")}


def test_policies_are_rendered(network):
    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in network.policies}
    assert {("dev-jane", "default-deny"), ("dev-jane", "allow-same-namespace"), ("dev-jane", "allow-ssh"),
            ("dev-ada", "allow-ssh"), ("dev-nossh", "default-deny")} <= names
    assert ("dev-nossh", "allow-ssh") not in names


@pytest.mark.parametrize("port", [29500, 29505, 29510, 2222])
def test_a_users_replicas_reach_each_other(network, pods, port):
    assert network.allowed(pods["jane-1"], pods["jane-0"], port)
    assert network.allowed(pods["jane-0"], pods["jane-1"], port)


@pytest.mark.parametrize("port", [29500, 29510, 2222, 8888])
def test_another_users_pods_are_denied(network, pods, port):
    assert not network.allowed(pods["ada-0"], pods["jane-0"], port)
    assert not network.allowed(pods["jane-0"], pods["ada-0"], port)
    assert not network.allowed(pods["nossh-0"], pods["jane-0"], port)


@pytest.mark.parametrize("source, target, port, allowed", [
    ("10.1.2.3", "jane-0", 2222, True),          # default sshAllowedCIDRs 10.0.0.0/8
    ("172.16.0.5", "jane-0", 2222, False),
    ("10.1.2.3", "jane-0", 29500, False),        # from outside: SSH only
    ("10.1.2.3", "jane-0", 22, False),
    ("10.20.7.7", "ada-0", 2222, True),          # ada: 10.20.0.0/16, 192.168.100.0/24
    ("192.168.100.9", "ada-0", 2222, True),
    ("10.30.0.1", "ada-0", 2222, False),
    ("10.1.2.3", "nossh-0", 2222, False),        # sshAllowedCIDRs: [] -> no SSH from outside
])
def test_ssh_only_from_allowed_cidrs(network, pods, source, target, port, allowed):
    assert network.allowed(source, pods[target], port) is allowed
    assert network.allowed(source, pods[target], port, "UDP") is False


def test_the_evaluator_is_not_vacuous(network, pods):
    """Without the policies everything flows; the tests above depend on them.  And an ipBlock
    admits a pod whose IP it covers: sshAllowedCIDRs must not cover the pod network."""
    assert Network(network.namespaces, []).allowed(pods["ada-0"], pods["jane-0"], 29500)
    inside = Pod("dev-ada", pods["ada-0"].labels, "10.0.2.10", pods["ada-0"].ports)
    assert network.allowed(inside, pods["jane-0"], 2222) and not network.allowed(inside, pods["jane-0"], 29500)
    only_same_ns = [p for p in network.policies if p["metadata"]["name"] == "allow-same-namespace"]
    assert not Network(network.namespaces, only_same_ns).allowed("10.1.2.3", pods["jane-0"], 2222)
