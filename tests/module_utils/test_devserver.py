"""Table-driven tests of plugins/module_utils/devserver.py."""

import pytest

from _flavors import GPU_FLAVOR, distributed_spec

from ansible_collections.torchdev.operator.plugins.module_utils import devserver, rendezvous





@pytest.mark.parametrize("spec,warnings", [
    ({"mode": "standalone"}, []),
    ({"mode": "distributed", "distributed": {"worldSize": 2}}, []),
    ({"mode": "standalone", "distributed": {"worldSize": 4}}, ["spec.distributed is ignored: spec.mode is standalone"]),
    ({"distributed": {"worldSize": 4}}, ["spec.distributed is ignored"]),
])
def test_spec_warnings(spec, warnings):
    got = devserver.spec_warnings(spec)
    assert len(got) == len(warnings) and all(g.startswith(w) for g, w in zip(got, warnings))
    assert devserver.spec_errors(dict(spec, owner="a@b.c", flavor="x")) == []


@pytest.mark.parametrize("raw,error", [
    ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "duplicate"),
    ([{"name": "TORCHDEV_NAME", "value": "x"}], "reserved"),
    ([{"name": "HOME", "value": "/root"}], "reserved"),
    ([{"value": "x"}], "need a name"),
])
def test_env_errors(raw, error):
    with pytest.raises(ValueError, match=error):
        devserver.env(raw, {"HOME": "/home/dev"})


def test_env_order_and_value_from():
    out = devserver.env([{"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "C", "value": 3}],
                {"TORCHDEV_Z": 1, "TORCHDEV_A": "a"})
    assert out == [{"name": "TORCHDEV_A", "value": "a"}, {"name": "TORCHDEV_Z", "value": "1"},
                   {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "C", "value": "3"}]


@pytest.mark.parametrize("spec,fragment", [
    ({"owner": "a@b.c", "flavor": "f", "persistentHomeSize": "10Mi"}, "at least 1Gi"),
    ({"owner": "a@b.c", "flavor": "f", "mode": "distributed", "distributed": {"worldSize": 3, "nprocsPerNode": 2}},
     "multiple"),
    ({"owner": "a@b.c", "flavor": "f", "env": [{"name": "TORCHDEV_X", "value": "1"}]}, "reserved"),
    ({"flavor": "f"}, "owner is required"),
])
def test_spec_errors(spec, fragment):
    assert any(fragment in e for e in devserver.spec_errors(spec))


@pytest.mark.parametrize("env,fragment", [
    ([{"name": "MASTER_ADDR", "value": "x"}], "MASTER_ADDR is set by the operator in distributed mode"),
    ([{"name": "NODE_RANK", "value": "0"}], "NODE_RANK is set by the operator"),
    ([{"name": "NCCL_DEBUG", "value": "INFO"}], "NCCL_DEBUG is set by the operator in distributed mode (use spec.distributed.ncclSettings)"),
    ([{"name": "FI_PROVIDER", "value": "tcp"}], "FI_PROVIDER"),
    ([{"name": "TORCHDEV_BACKEND", "value": "x"}], "TORCHDEV_BACKEND is reserved"),
])
def test_distributed_reserved_env_is_invalid_spec(env, fragment):
    problem = devserver.spec_problem(distributed_spec(env=env))
    assert problem["reason"] == "InvalidSpec" and fragment in problem["message"]
    # the same names are the user's in a standalone server (except TORCHDEV_*)
    standalone = devserver.spec_problem({"owner": "a@b.c", "flavor": "gpu", "env": env})
    assert (standalone is None) == (not env[0]["name"].startswith("TORCHDEV_"))


def test_env_reserved_and_default_entries():
    rdzv_env = rendezvous.rendezvous_env(distributed_spec(1), GPU_FLAVOR, name="x", namespace="ns")
    out = devserver.env([{"name": "A", "value": "$(NODE_RANK)"}], {"HOME": "/h"}, rdzv_env,
                [{"name": "PATH", "value": "/opt/torchdev/bin:/bin"}], True)
    names = [e["name"] for e in out]
    assert names[-1] == "A" and names[:-1] == sorted(names[:-1])
    assert {"NODE_RANK", "MASTER_ADDR", "PATH", "HOME", "NCCL_DEBUG"} <= set(names)
    with pytest.raises(ValueError, match="WORLD_SIZE is reserved"):
        devserver.env([{"name": "WORLD_SIZE", "value": "9"}], {}, rdzv_env)
    # standalone: the single-process values and PATH are defaults a user variable replaces
    single = rendezvous.rendezvous_env({"owner": "a@b.c", "flavor": "gpu"}, GPU_FLAVOR, name="x", namespace="ns")
    out = devserver.env([{"name": "WORLD_SIZE", "value": "2"}, {"name": "PATH", "value": "/mine"}], {"HOME": "/h"}, [],
                single + [{"name": "PATH", "value": "/opt/torchdev/bin:/bin"}])
    assert [e for e in out if e["name"] in ("WORLD_SIZE", "PATH")] == [
        {"name": "WORLD_SIZE", "value": "2"}, {"name": "PATH", "value": "/mine"}]


QUOTA = {"metadata": {"name": "torchdev-quota"},
         "spec": {"hard": {"requests.cpu": "64", "requests.memory": "256Gi", "requests.nvidia.com/gpu": "0",
                           "persistentvolumeclaims": "32", "requests.storage": "2Ti"}}}
SCOPED = {"metadata": {"name": "best-effort"}, "spec": {"hard": {"pods": "0"}, "scopes": ["BestEffort"]}}
A10G = {"requests": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
SMALL = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}
CLAIM = {"metadata": {"name": "team"}}


@pytest.mark.parametrize("spec,claim,quotas,resources,replicas,reason,fragment", [
    ({"flavor": "cpu-small"}, None, [QUOTA], SMALL, 1, None, None),
    ({"flavor": "cpu-small", "sharedVolumeClaimName": "team"}, CLAIM, [QUOTA], SMALL, 1, None, None),
    ({"flavor": "cpu-small", "sharedVolumeClaimName": "team"}, None, [QUOTA], SMALL, 1, "ClaimNotFound",
     "spec.sharedVolumeClaimName: PersistentVolumeClaim team does not exist"),
    ({"flavor": "gpu-a10g-1"}, None, [QUOTA], A10G, 1, "QuotaExceeded",
     "needs requests.nvidia.com/gpu 1 with flavor gpu-a10g-1, more than ResourceQuota torchdev-quota allows"),
    ({"flavor": "gpu-a10g-1", "suspend": True}, None, [QUOTA], A10G, 1, None, None),  # suspended: no pods
    ({"flavor": "cpu-small"}, None, [QUOTA], SMALL, 40, "QuotaExceeded", "persistentvolumeclaims 40 (40 replicas x 1)"),
    ({"flavor": "cpu-small"}, None, [{"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "3"}}}], SMALL, 2,
     "QuotaExceeded", "requests.cpu 4 (2 replicas x 2)"),
    ({"flavor": "cpu-small", "persistentHomeSize": "1Ti"}, None, [QUOTA], SMALL, 3, "QuotaExceeded",
     "requests.storage 3Ti (3 replicas x 1Ti)"),
    ({"flavor": "cpu-small"}, None, [SCOPED], SMALL, 1, None, None),  # scoped quotas count only some pods
    ({"flavor": "cpu-small"}, None, [{"metadata": {"name": "q"}, "spec": {"hard": {"limits.memory": "4Gi"}}}],
     SMALL, 1, "QuotaExceeded", "limits.memory 8Gi"),
    ({"flavor": "cpu-small"}, None, [{"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}}}], SMALL, 2,
     "QuotaExceeded", "pods 2"),
    ({"flavor": "cpu-small"}, None, None, SMALL, 1, None, None),
])
def test_placement_problem(spec, claim, quotas, resources, replicas, reason, fragment):
    problem = devserver.placement_problem(spec, claim, quotas, resources, replicas, spec["flavor"])
    assert (problem or {}).get("reason") == reason
    if fragment:
        assert fragment in problem["message"]


@pytest.mark.parametrize("problem,deadline,period", [
    ({"reason": "ClaimNotFound"}, "", "60s"),
    ({"reason": "QuotaExceeded"}, "3600s", "60s"),
    ({"reason": "QuotaExceeded"}, "30s", "30s"),
    ({"reason": "InvalidSpec"}, "", ""),         # waits for the spec to change
    ({"reason": "FlavorNotFound"}, "120s", "120s"),
])
def test_problem_requeue(problem, deadline, period):
    assert devserver.problem_requeue(problem, deadline) == period


ALICE = {"metadata": {"name": "alice"}, "spec": {"email": "alice@example.com"}}


@pytest.mark.parametrize("spec,devuser,mismatch", [
    ({"owner": "alice@example.com"}, ALICE, False),            # the DevUser's own server
    ({"owner": "bob@example.com"}, ALICE, True),               # billed to someone else: rejected
    ({"owner": "Alice@example.com"}, ALICE, True),             # exact: the records store the string
    ({"owner": "alice@example.com "}, ALICE, True),
    ({}, ALICE, True),                                         # no owner at all (the CRD requires one)
    ({"owner": None}, ALICE, True),
    ({"owner": ["alice@example.com"]}, ALICE, True),           # wrong type
    ({"owner": "bob@example.com"}, None, False),               # a namespace without a DevUser: nothing to compare
    ({"owner": "bob@example.com"}, {"metadata": {"name": "x"}}, False),     # a DevUser without an e-mail
    ({"owner": "bob@example.com"}, {"spec": {"email": ""}}, False),
    ({"owner": "bob@example.com"}, {"spec": {"email": 7}}, False),
    ({"owner": "bob@example.com"}, {"spec": "junk"}, False),
    ({"owner": "bob@example.com"}, "junk", False),
    ({"owner": "bob@example.com"}, {"metadata": "junk", "spec": {"email": "alice@example.com"}}, True),
    (None, ALICE, True),
    ("junk", ALICE, True),
])
def test_owner_problem(spec, devuser, mismatch):
    problem = devserver.owner_problem(spec, devuser, "dev-alice")
    if not mismatch:
        assert problem is None
        return
    assert problem["reason"] == "OwnerMismatch"
    message = problem["message"]
    assert message.startswith("spec.owner ") and "namespace dev-alice" in message
    assert "set spec.owner to alice@example.com" in message   # what to do
    if isinstance(spec, dict) and isinstance(spec.get("owner"), str):
        assert spec["owner"] in message


def test_owner_problem_bounds_the_message():
    problem = devserver.owner_problem({"owner": "x" * 10000 + "@e.com"}, ALICE)
    assert len(problem["message"]) < 600 and "this namespace" in problem["message"]


# --- the Secret whose authorized_keys sshd reads besides spec.sshPublicKeys (issue 27.1) ---
USER = {"metadata": {"name": "jane"}, "status": {"namespace": "dev-jane", "sshKeySecretName": "ssh-public-keys"}}
USERS_KEYS = {"name": "ssh-public-keys", "key": "authorized_keys", "optional": True}


@pytest.mark.parametrize("spec,devuser,secret", [
    # a DevServer in a DevUser's namespace: the user's keys, optional (the Secret may not be written yet)
    ({}, USER, USERS_KEYS),
    ({"mountUserSSHKeys": True, "enableSSH": True}, USER, USERS_KEYS),
    # inline keys do not replace them: sshd reads both files (the union)
    ({"sshPublicKeys": ["ssh-ed25519 AAAA x"]}, USER, USERS_KEYS),
    # the opt-out
    ({"mountUserSSHKeys": False}, USER, {}),
    # an explicit Secret wins over the user's (required: the pod waits for it), with or without the opt-out
    ({"sshKeySecretRef": {"name": "team-keys"}}, USER, {"name": "team-keys", "key": "authorized_keys", "optional": False}),
    ({"sshKeySecretRef": {"name": "team-keys", "key": "id.pub"}, "mountUserSSHKeys": False}, USER,
     {"name": "team-keys", "key": "id.pub", "optional": False}),
    ({"sshKeySecretRef": {"name": "team-keys", "key": ""}}, None, {"name": "team-keys", "key": "authorized_keys",
                                                                  "optional": False}),
    # no sshd, no keys
    ({"enableSSH": False}, USER, {}),
    ({"enableSSH": False, "sshKeySecretRef": {"name": "team-keys"}}, USER, {}),
    # no DevUser (a plain namespace), or one whose status names no Secret yet
    ({}, None, {}),
    ({}, {"metadata": {"name": "jane"}}, {}),
    ({}, {"status": {"sshKeySecretName": ""}}, {}),
    # hostile values: nothing mounted, nothing raised
    ({"sshKeySecretRef": {"name": ""}}, USER, USERS_KEYS),  # spec_errors reports the missing name
    ({"sshKeySecretRef": {"name": 7}}, None, {}),
    ({"sshKeySecretRef": "team-keys"}, None, {}),
    ({}, {"status": {"sshKeySecretName": ["x"]}}, {}),
    ({}, {"status": "Active"}, {}),
    (None, USER, USERS_KEYS),
    ("spec", "user", {}),
])
def test_ssh_key_secret(spec, devuser, secret):
    assert devserver.ssh_key_secret(spec, devuser) == secret


# --- spec.ssh.serviceType: the <name>-ssh Service and its NetworkPolicy (issue 27.6) ---
ANY = ["0.0.0.0/0"]


@pytest.mark.parametrize("spec,default,cidrs,devuser,expected", [
    # unset: the operator's cluster default
    ({}, "ClusterIP", ANY, USER, {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    ({}, "NodePort", ANY, USER, {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": ANY}),
    ({"ssh": {}}, "LoadBalancer", ANY, USER,
     {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": ANY}),
    # set: the spec wins over the default, either way
    ({"ssh": {"serviceType": "ClusterIP"}}, "NodePort", ANY, USER,
     {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    ({"ssh": {"serviceType": "NodePort"}}, "ClusterIP", ANY, USER,
     {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": ANY}),
    ({"ssh": {"serviceType": "LoadBalancer"}}, "ClusterIP", ["10.0.0.0/8", "192.168.0.0/16"], USER,
     {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": ["10.0.0.0/8", "192.168.0.0/16"]}),
    # the CIDRs as the env gives them (comma-separated), invalid and repeated ones left out
    ({"ssh": {"serviceType": "NodePort"}}, "ClusterIP", "10.0.0.0/8, 10.1.2.3/8,nope,10.0.0.0/8,::/0", USER,
     {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": ["10.0.0.0/8", "::/0"]}),
    # no valid CIDR: no policy
    ({"ssh": {"serviceType": "NodePort"}}, "ClusterIP", [], USER,
     {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": []}),
    # not a DevUser's namespace: no default-deny of torchdev's to open, no policy
    ({"ssh": {"serviceType": "NodePort"}}, "ClusterIP", ANY, None,
     {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": []}),
    # a default that is not a type (a typo in the operator's config): ClusterIP
    ({}, "nodeport", ANY, USER, {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    ({}, None, ANY, USER, {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    # hostile values: ClusterIP, nothing raised (the CRD's enum refuses them first)
    ({"ssh": {"serviceType": "ExternalName"}}, "NodePort", ANY, USER,
     {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    ({"ssh": {"serviceType": ["NodePort"]}}, "NodePort", ANY, USER,
     {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    ({"ssh": "NodePort"}, "ClusterIP", ANY, USER, {"type": "ClusterIP", "externalTrafficPolicy": None, "networkPolicyCIDRs": []}),
    ({"ssh": {"serviceType": "NodePort"}}, "ClusterIP", [7, None, {"cidr": "0.0.0.0/0"}], USER,
     {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": []}),
    ({"ssh": {"serviceType": "NodePort"}}, "ClusterIP", {"a": 1}, "user",
     {"type": "NodePort", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": []}),
    (None, "LoadBalancer", ANY, USER, {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "networkPolicyCIDRs": ANY}),
])
def test_ssh_service(spec, default, cidrs, devuser, expected):
    assert devserver.ssh_service(spec, default, cidrs, devuser) == expected


def _svc(kind, node_port=None, ingress=None):
    port = {"name": "ssh", "port": 22, "targetPort": 2222, "protocol": "TCP"}
    if node_port is not None:
        port["nodePort"] = node_port
    svc = {"metadata": {"name": "s-ssh"}, "spec": {"type": kind, "ports": [port]}}
    if ingress is not None:
        svc["status"] = {"loadBalancer": {"ingress": ingress}}
    return svc


POD0 = {"metadata": {"name": "s-0"}, "spec": {"nodeName": "node-a"}, "status": {"hostIP": "10.0.0.5"}}
NODE = {"metadata": {"name": "node-a"}, "status": {"addresses": [
    {"type": "Hostname", "address": "node-a"}, {"type": "InternalIP", "address": "10.0.0.5"},
    {"type": "ExternalIP", "address": "203.0.113.7"}]}}
INTERNAL_ONLY = {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]}}
NP_WAIT_POD = {"serviceType": "NodePort", "port": 30022,
               "message": "waiting for replica 0 to run on a node (its address is the host to connect to)"}
LB_WAIT = {"serviceType": "LoadBalancer",
           "message": "waiting for the load balancer's address (status.loadBalancer of Service s-ssh)"}


@pytest.mark.parametrize("service,pods,node,expected", [
    # ClusterIP, or no Service (enableSSH false): no direct address
    (_svc("ClusterIP"), [POD0], NODE, None),
    (None, [POD0], NODE, None),
    # NodePort: the node's ExternalIP, else its InternalIP, else the pod's hostIP
    (_svc("NodePort", 30022), [POD0], NODE,
     {"serviceType": "NodePort", "host": "203.0.113.7", "port": 30022, "command": "ssh -p 30022 dev@203.0.113.7"}),
    (_svc("NodePort", 30022), [POD0], INTERNAL_ONLY,
     {"serviceType": "NodePort", "host": "10.0.0.5", "port": 30022, "command": "ssh -p 30022 dev@10.0.0.5"}),
    (_svc("NodePort", 30022), [POD0], None,
     {"serviceType": "NodePort", "host": "10.0.0.5", "port": 30022, "command": "ssh -p 30022 dev@10.0.0.5"}),
    # only replica 0's node: the Service selects that pod
    (_svc("NodePort", 30022), [{"metadata": {"name": "s-1"}, "status": {"hostIP": "10.0.0.9"}}], None, NP_WAIT_POD),
    # not scheduled yet, or no port yet
    (_svc("NodePort", 30022), [{"metadata": {"name": "s-0"}, "status": {}}], None, NP_WAIT_POD),
    (_svc("NodePort"), [POD0], NODE, {"serviceType": "NodePort", "message": "waiting for the node port of Service s-ssh"}),
    # LoadBalancer: its ip, else its hostname, on port 22
    (_svc("LoadBalancer", 30100, [{"ip": "198.51.100.4"}]), [POD0], None,
     {"serviceType": "LoadBalancer", "host": "198.51.100.4", "port": 22, "command": "ssh -p 22 dev@198.51.100.4"}),
    (_svc("LoadBalancer", 30100, [{"hostname": "a1.elb.example.com"}]), [], None,
     {"serviceType": "LoadBalancer", "host": "a1.elb.example.com", "port": 22, "command": "ssh -p 22 dev@a1.elb.example.com"}),
    # pending: no cloud controller gave it an address (yet)
    (_svc("LoadBalancer", 30100), [POD0], NODE, LB_WAIT),
    (_svc("LoadBalancer", 30100, []), [POD0], NODE, LB_WAIT),
    # hostile values: treated as absent, never a command with them, nothing raised
    (_svc("LoadBalancer", 30100, [{"hostname": "evil; rm -rf ~"}, {"ip": 7}]), [], None, LB_WAIT),
    (_svc("NodePort", 30022), [POD0], {"status": {"addresses": [{"type": "ExternalIP", "address": "$(id)"}]}},
     {"serviceType": "NodePort", "host": "10.0.0.5", "port": 30022, "command": "ssh -p 30022 dev@10.0.0.5"}),
    (_svc("NodePort", True), [POD0], NODE, {"serviceType": "NodePort", "message": "waiting for the node port of Service s-ssh"}),
    (_svc("NodePort", 70000), [POD0], NODE, {"serviceType": "NodePort", "message": "waiting for the node port of Service s-ssh"}),
    ({"spec": {"type": "NodePort", "ports": "22"}}, "pods", "node",
     {"serviceType": "NodePort", "message": "waiting for the node port of Service the ssh Service"}),
    ({"spec": "NodePort"}, None, None, None),
    ("service", None, None, None),
])
def test_ssh_access(service, pods, node, expected):
    assert devserver.ssh_access(service, pods, "s", node) == expected


@pytest.mark.parametrize("service_type,pods,node", [
    ("NodePort", [POD0], "node-a"),
    ("NodePort", [{"metadata": {"name": "s-1"}, "spec": {"nodeName": "node-b"}}, POD0], "node-a"),
    ("NodePort", [{"metadata": {"name": "s-0"}, "spec": {}}], ""),    # not scheduled yet
    ("LoadBalancer", [POD0], ""),                                     # its address is the load balancer's
    ("ClusterIP", [POD0], ""),
    ("NodePort", [{"metadata": {"name": "s-0"}, "spec": {"nodeName": "a/../b"}}], ""),
    ("NodePort", "pods", ""),
    (None, None, ""),
])
def test_ssh_node_name(service_type, pods, node):
    assert devserver.ssh_node_name(service_type, pods, "s") == node
