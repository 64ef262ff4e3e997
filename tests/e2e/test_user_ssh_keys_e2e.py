"""The keys a user was onboarded with reach their servers (issue 27.1).

``devctl admin onboard --ssh-key-file`` stores the keys in the DevUser (its role writes the
Secret ``ssh-public-keys`` of dev-<user>); a DevServer created afterwards in that namespace with
``devctl create`` (no key of its own: an empty ~/.ssh) or from seed 000's YAML (no key field at
all) mounts that Secret where sshd reads it, ``--no-user-keys`` (spec.mountUserSSHKeys
false) keeps it out, and ``devctl reserve --ssh-key-secret`` (spec.sshKeySecretRef) mounts
another Secret instead.  That sshd accepts the key from there is shown with the real OpenSSH
server by tests/security/test_ssh_user_keys.py."""
from __future__ import annotations

import base64
import subprocess

import pytest
from click.testing import CliRunner

from _e2e_helpers import GROUP, NODES as SAMPLE_NODES, ROOT, VERSION, get_ds, wait_ready
from _support import tool

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The sample nodes and seed 000's: instance-type g4dn.xlarge, one GPU (its flavor's nodeSelector).
NODES = SAMPLE_NODES + ";g4dn:1x{cpu:16,memory:64Gi,nvidia.com/gpu:1,labels:{instance-type:g4dn.xlarge}}"
USER, EMAIL = "alice", "alice@company.com"  # seed 000's owner is <user>@company.com
NS = f"dev-{USER}"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnboardedKeyReachesTheServersxxxxxxxxxxxxxxxxxx alice@laptop"
SEED = ROOT / "tests" / "data" / "seed000"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A HOME without ~/.ssh: devctl create finds no key of its own."""
    return tmp_path_factory.mktemp("home")


def devctl(sim, home, *args: str) -> str:
    from devctl.main import cli

    env = {"HOME": str(home), "DEVCTL_CONFIG": str(home / "devctl.yaml"), "KUBECONFIG": ""}
    res = CliRunner(env=env).invoke(cli, ["--kubeconfig", sim.kubeconfig, *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def secret_volume(kube, name: str):
    pod = kube["core"].read_namespaced_pod(f"{name}-0", NS)
    mounts = {m.name: m.mount_path for m in pod.spec.containers[0].volume_mounts}
    secrets = [v for v in pod.spec.volumes if v.secret]
    return [(v.secret.secret_name, mounts.get(v.name), [(i.key, i.path) for i in v.secret.items]) for v in secrets]


@pytest.fixture(scope="module")
def onboarded(sim, kube, runtime, home):
    (home / "alice.pub").write_text(KEY + "\n")
    devctl(sim, home, "admin", "onboard", USER, "--email", EMAIL, "--ssh-key-file", str(home / "alice.pub"),
           "--gpus", "1", "--wait", "--timeout", "120s")
    user = kube["custom"].get_cluster_custom_object(GROUP, VERSION, "devusers", USER)
    assert user["status"]["sshKeySecretName"] == "ssh-public-keys"
    data = kube["core"].read_namespaced_secret("ssh-public-keys", NS).data
    assert base64.b64decode(data["authorized_keys"]).decode() == KEY + "\n"
    return user


def test_devctl_create_mounts_the_onboarded_keys(sim, kube, runtime, home, onboarded):
    out = devctl(sim, home, "-n", NS, "create", "laptop", "--flavor", "cpu-small", "--owner", EMAIL)
    assert "no SSH public key found" in out  # none of its own: only the onboarded ones will do
    wait_ready(sim, kube, NS, "laptop", timeout=120)
    assert "sshPublicKeys" not in get_ds(kube, NS, "laptop")["spec"]
    assert secret_volume(kube, "laptop") == [("ssh-public-keys", "/etc/torchdev/ssh-secret",
                                              [("authorized_keys", "authorized_keys")])]
    described = devctl(sim, home, "-n", NS, "get", "laptop")
    assert "your DevUser's" in described


def test_seed_000s_server_mounts_the_onboarded_keys(sim, kube, runtime, onboarded):
    placeholders = {"<server-name>": "my-dev", "<username>": USER, "<user>": USER}
    for name in ("devserverflavor.yaml", "devserver.yaml"):
        text = (SEED / name).read_text()
        for placeholder, value in placeholders.items():
            text = text.replace(placeholder, value)
        proc = subprocess.run([tool("kubectl"), "--kubeconfig", sim.kubeconfig, "apply", "-f", "-"], input=text,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    wait_ready(sim, kube, NS, "my-dev", timeout=120)
    assert secret_volume(kube, "my-dev") == [("ssh-public-keys", "/etc/torchdev/ssh-secret",
                                              [("authorized_keys", "authorized_keys")])]


def test_no_user_keys_opts_out(sim, kube, runtime, home, onboarded):
    (home / "own.pub").write_text(KEY.replace("alice@laptop", "alice@other") + "\n")
    devctl(sim, home, "-n", NS, "create", "private", "--flavor", "cpu-small", "--owner", EMAIL,
           "--ssh-key-file", str(home / "own.pub"), "--no-user-keys")
    wait_ready(sim, kube, NS, "private", timeout=120)
    assert get_ds(kube, NS, "private")["spec"]["mountUserSSHKeys"] is False
    assert secret_volume(kube, "private") == []  # only its own keys (the <name>-ssh ConfigMap)


def test_reserve_with_a_key_secret_mounts_it_instead(sim, kube, runtime, home, onboarded):
    """devctl reserve --ssh-key-secret NAME:KEY (spec.sshKeySecretRef): that Secret, not the DevUser's."""
    team = KEY.replace("alice@laptop", "team@ci")
    kube["core"].create_namespaced_secret(NS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "team-keys"},
        "data": {"id.pub": base64.b64encode((team + "\n").encode()).decode()}})
    devctl(sim, home, "-n", NS, "reserve", "--name", "shared-box", "--gpus", "0", "--hours", "1",
           "--flavor", "cpu-small", "--owner", EMAIL, "--ssh-key-secret", "team-keys:id.pub")
    wait_ready(sim, kube, NS, "shared-box", timeout=120)
    assert get_ds(kube, NS, "shared-box")["spec"]["sshKeySecretRef"] == {"name": "team-keys", "key": "id.pub"}
    assert secret_volume(kube, "shared-box") == [("team-keys", "/etc/torchdev/ssh-secret", [("id.pub", "authorized_keys")])]
