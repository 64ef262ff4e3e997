"""Every 404 says what is missing and what to do (issue 28.1).

A table over the 404s a kube-apiserver answers (the Status bodies as it writes them: a missing
namespace on create, a server without the resource, the named object, another object), then the
same causes end to end against kubesim with devctl's default namespace (dev-<user> from the
configured e-mail), the one a fresh setup hits first.
"""
from __future__ import annotations

import pytest

from devctl.errors import not_found_message

from devctl_helpers import invoke

RESOURCE = "devservers.torchdev.io"
ORIGIN = "dev-<user> from your e-mail ada@example.com (git's user.email)"

# (id, Status message, Status details, name asked for, namespace, resource, torchdev, fragments (None: the
# object itself is missing: the caller's '<kind> "<name>" not found'))
CASES = [
    ("create in a namespace that does not exist", 'namespaces "dev-ada" not found',
     {"name": "dev-ada", "kind": "namespaces"}, "my-dev", "dev-ada", RESOURCE, True,
     ['namespace "dev-ada" does not exist', ORIGIN, "'devctl admin onboard <user>'", "-n NAMESPACE",
      "'devctl config set namespace NAMESPACE'", "'devctl whoami'"]),
    ("another namespace than the default: no origin", 'namespaces "team" not found',
     {"name": "team", "kind": "namespaces"}, "my-dev", "elsewhere", RESOURCE, True,
     ['namespace "team" does not exist:', "'devctl admin onboard <user>'"]),
    ("a namespace from the message alone", 'namespaces "dev-ada" not found', {}, None, "dev-ada", RESOURCE, True,
     ['namespace "dev-ada" does not exist', ORIGIN]),
    ("the CRDs are not installed", "the server could not find the requested resource", {}, None, "dev-ada",
     RESOURCE, True, ["the server has no resource devservers.torchdev.io", "the torchdev CRDs are not installed",
                      "'make install'"]),
    ("another API is missing (Kueue)", "the server could not find the requested resource", {}, None, "dev-ada",
     "localqueues.kueue.x-k8s.io", False, ["the server has no resource localqueues.kueue.x-k8s.io"]),
    ("the object itself", 'devservers.torchdev.io "my-dev" not found',
     {"name": "my-dev", "group": "torchdev.io", "kind": "devservers"}, "my-dev", "dev-ada", RESOURCE, True, None),
    ("the object, from the message", 'devservers.torchdev.io "my-dev" not found', {}, "my-dev", "dev-ada",
     RESOURCE, True, None),
    ("another named object", 'devserverflavors.torchdev.io "gpu-x" not found',
     {"name": "gpu-x", "kind": "devserverflavors"}, "my-dev", "dev-ada", RESOURCE, True,
     ['devserverflavors "gpu-x" not found in namespace "dev-ada"']),
    ("a server named like its missing namespace", 'namespaces "dev-ada" not found',
     {"name": "dev-ada", "kind": "namespaces"}, "dev-ada", "dev-ada", RESOURCE, True, ['namespace "dev-ada" does not exist']),
    ("hostile details: not a dict", "", "garbage", None, None, RESOURCE, True, ["the torchdev CRDs are not installed"]),
]


@pytest.mark.parametrize("message,details,name,namespace,resource,torchdev,fragments",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_not_found_message(message, details, name, namespace, resource, torchdev, fragments):
    origin = ORIGIN if namespace == "dev-ada" else None
    text = not_found_message(message, details, "devserver", name, namespace, resource, origin, torchdev)
    if fragments is None:
        assert text is None
        return
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, text
    assert "are the torchdev CRDs installed?" not in text  # the old guess


def test_reading_a_missing_namespace_is_that_object_not_found():
    """devctl admin reads namespaces: their 404 is the object's own (NotFound, which it handles)."""
    assert not_found_message('namespaces "dev-ada" not found', {"name": "dev-ada", "kind": "namespaces"},
                             "namespace", "dev-ada", None, "namespaces", None, False) is None


@pytest.fixture
def fresh_user(tmp_path, monkeypatch):
    """A new user's setup: no devctl config, no -n, git's user.email newbie@example.com."""
    import devctl.settings

    monkeypatch.setattr(devctl.settings, "git_user_email", lambda: "newbie@example.com")


def test_a_fresh_setup_is_told_its_namespace_is_missing(sim, fresh_user):
    """The first command of issue 28.1: the CRDs are installed, dev-newbie is not there."""
    result = invoke(["--kubeconfig", sim.kubeconfig, "create", "my-dev", "--flavor", "cpu-small"])
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()[-1:]
    assert line.startswith('error: namespace "dev-newbie" does not exist (dev-<user> from your e-mail '
                           "newbie@example.com (git's user.email)): "), line
    assert "CRDs" not in line
    whoami = invoke(["--kubeconfig", sim.kubeconfig, "whoami", "-o", "json"])
    import json

    me = json.loads(whoami.stdout)
    assert me["namespace"] == "dev-newbie" and me["namespaceFrom"].startswith("dev-<user> from your e-mail")


def test_a_missing_object_names_itself(sim, ns):
    result = invoke(["--kubeconfig", sim.kubeconfig, "-n", ns, "get", "nope"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == f'error: devserver "nope" not found in namespace "{ns}"'


def test_a_cluster_without_the_crds_says_so(tmp_path):
    from kubesim import testing

    with testing.KubeSim() as bare:  # no CRDs installed
        result = invoke(["--kubeconfig", bare.kubeconfig, "-n", "default", "list"])
    assert result.exit_code == 1
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: the server has no resource devservers.torchdev.io: the torchdev CRDs are not installed")
