"""Which SSH keys ``devctl create`` and ``devctl reserve`` give a server (issue 27.1).

By default a server accepts the keys its DevUser was onboarded with (the operator mounts the
DevUser's Secret: tests/e2e/test_user_ssh_keys_e2e.py) plus its own, spec.sshPublicKeys: the
--ssh-key-file files, else ~/.ssh/id_*.pub and the keys ``devctl config set github-user`` stored.
--ssh-key-secret NAME[:KEY] names a Secret of the namespace instead of the DevUser's
(spec.sshKeySecretRef), --no-user-keys leaves the DevUser's out (spec.mountUserSSHKeys false);
``reserve`` takes the same three flags.  Against kubesim with the CRDs (their defaults apply)."""
from __future__ import annotations

import pytest
import yaml

from devctl_helpers import OWNER

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFileKeyxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx alice@laptop"
GITHUB_KEYS = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGitHubKeyxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
               "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCGitHubRsaKey"]


def _keys(spec: dict) -> dict:
    return {k: spec.get(k) for k in ("sshPublicKeys", "sshKeySecretRef", "mountUserSSHKeys")}


@pytest.mark.parametrize("args, expected", [
    ([], {"sshPublicKeys": None, "sshKeySecretRef": None, "mountUserSSHKeys": True}),
    (["--ssh-key-secret", "team-keys"],
     {"sshPublicKeys": None, "sshKeySecretRef": {"name": "team-keys", "key": "authorized_keys"}, "mountUserSSHKeys": True}),
    (["--ssh-key-secret", "team-keys:id_ed25519.pub"],
     {"sshPublicKeys": None, "sshKeySecretRef": {"name": "team-keys", "key": "id_ed25519.pub"}, "mountUserSSHKeys": True}),
    (["--no-user-keys", "--ssh-key-file", "{key}"],
     {"sshPublicKeys": [KEY], "sshKeySecretRef": None, "mountUserSSHKeys": False}),
])
@pytest.mark.parametrize("command", ["create", "reserve"])
def test_key_flags_of_create_and_reserve(devctl, cluster, tmp_path, command, args, expected):
    (tmp_path / "k.pub").write_text(KEY + "\n")
    args = [a.replace("{key}", str(tmp_path / "k.pub")) for a in args]
    name = f"{command[:3]}{len(args)}{len(''.join(args)) % 97}"
    head = (["create", name, "--flavor", "cpu-small"] if command == "create"
            else ["reserve", "--name", name, "--gpus", "0", "--hours", "2", "--flavor", "cpu-small"])
    result = devctl(*head, "--owner", OWNER, *args)
    assert result.exit_code == 0, result.stderr
    assert _keys(cluster.devserver(name)["spec"]) == expected


@pytest.mark.parametrize("value", ["Team_Keys", "team-keys:", ":authorized_keys", "team-keys:a/b", "x" * 254])
def test_ssh_key_secret_is_checked_before_anything_is_sent(devctl, cluster, value):
    result = devctl("create", "bad", "--flavor", "cpu-small", "--owner", OWNER, "--ssh-key-secret", value)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--ssh-key-secret'" in result.stderr, result.stderr
    assert "bad" not in cluster.devserver_names()


@pytest.mark.parametrize("command", ["create", "reserve"])
def test_the_configured_github_users_keys_reach_the_server(devctl, cluster, tmp_path, command):
    """`devctl config set github-user U` stored U's keys in the config: create and reserve give them
    to the server (no ~/.ssh key here), as admin onboard --github-user gives them to the DevUser."""
    import os

    with open(os.environ["DEVCTL_CONFIG"], "w") as fh:
        yaml.safe_dump({"github-user": "octo", "ssh-public-keys": GITHUB_KEYS}, fh)
    name = f"gh{command[:3]}"
    head = (["create", name, "--flavor", "cpu-small"] if command == "create"
            else ["reserve", "--name", name, "--gpus", "0", "--hours", "1", "--flavor", "cpu-small"])
    result = devctl(*head, "--owner", OWNER)
    assert result.exit_code == 0, result.stderr
    assert "no SSH public key found" not in result.stderr
    assert cluster.devserver(name)["spec"]["sshPublicKeys"] == GITHUB_KEYS
