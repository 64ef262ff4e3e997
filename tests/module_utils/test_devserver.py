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
