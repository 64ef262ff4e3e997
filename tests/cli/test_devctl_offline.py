"""devctl tests that need no API server: help/lazy imports, config and namespace
resolution, object building (create --dry-run), output formatting."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from _support import tool

from devctl_helpers import invoke

SUBCOMMANDS = [[], ["create"], ["list"], ["get"], ["delete"], ["ssh"], ["flavors"],
               ["config"], ["config", "view"], ["config", "set-namespace"], ["version"],
               ["whoami"], ["quota"], ["queue"], ["usage"], ["admin"], ["admin", "onboard"],
               ["admin", "offboard"], ["admin", "users"]]


# -- help and lazy imports ------------------------------------------------------------------

def test_help_never_imports_kubernetes():
    code = f"""
import sys
from click.testing import CliRunner
from devctl.main import cli
for args in {SUBCOMMANDS!r}:
    result = CliRunner().invoke(cli, args + ["--help"])
    assert result.exit_code == 0, (args, result.output)
    assert "Usage:" in result.output
loaded = sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes."))
assert not loaded, loaded
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_console_script_help():

    proc = subprocess.run([tool("devctl"), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for cmd in ("create", "list", "get", "delete", "ssh", "flavors", "config", "version",
                "whoami", "quota", "queue", "admin"):
        assert cmd in proc.stdout


def test_version_json():
    result = invoke(["version", "-o", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["apiVersion"] == "torchdev.io/v1alpha1"
    assert data["clientVersion"]


def test_usage_error_is_one_line_exit_2():
    result = invoke(["create", "x"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--flavor" in lines[0]
    assert result.stdout == ""


def test_no_kubeconfig_is_one_line_exit_1():
    result = invoke(["-n", "dev-x", "list"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")


# -- config and namespace resolution -----------------------------------------------------

def _write_kubeconfig(path, namespace=None):
    ctx = {"cluster": "c", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "main",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "main", "context": ctx},
                     {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "team-b"}}],
    }))
    return path


def _effective(*args):
    result = invoke([*args, "config", "view", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["effective"]


def test_namespace_falls_back_to_user_env(monkeypatch):
    monkeypatch.setenv("USER", "Bob.Smith_2")
    eff = _effective()
    assert eff["namespace"] == "dev-bob-smith-2"
    assert eff["namespaceSource"] == "user"


def test_namespace_from_owner_local_part(monkeypatch):
    import devctl.settings

    monkeypatch.setattr(devctl.settings, "git_user_email", lambda: "Jane.Doe+gpu@example.com")
    eff = _effective()
    assert eff["owner"] == "Jane.Doe+gpu@example.com"
    assert eff["namespace"] == "dev-jane-doe-gpu"


def test_namespace_precedence(tmp_path):
    kubeconfig = _write_kubeconfig(tmp_path / "kc", namespace="team-a")
    assert _effective("--kubeconfig", kubeconfig)["namespace"] == "team-a"
    assert _effective("--kubeconfig", kubeconfig, "--context", "other")["namespace"] == "team-b"
    # a context namespace of "default" is ignored
    default_ns = _write_kubeconfig(tmp_path / "kc2", namespace="default")
    assert _effective("--kubeconfig", default_ns)["namespace"] == "dev-tester"
    # config beats the kube context, the flag beats everything
    assert invoke(["config", "set-namespace", "from-config"]).exit_code == 0
    assert _effective("--kubeconfig", kubeconfig)["namespace"] == "from-config"
    eff = _effective("--kubeconfig", kubeconfig, "-n", "from-flag")
    assert (eff["namespace"], eff["namespaceSource"]) == ("from-flag", "flag")


def test_kubeconfig_env_list_is_merged(tmp_path, monkeypatch):
    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": []}))
    second = _write_kubeconfig(tmp_path / "second", namespace="team-a")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    assert _effective()["namespace"] == "team-a"


def test_config_set_and_view(tmp_path, monkeypatch):
    path = tmp_path / "devctl.yaml"
    assert invoke(["config", "set-owner", "alice@example.com"]).exit_code == 0
    assert invoke(["config", "set-namespace", "dev-alice"]).exit_code == 0
    assert yaml.safe_load(path.read_text()) == {"owner": "alice@example.com", "namespace": "dev-alice"}
    view = json.loads(invoke(["config", "view", "-o", "json"]).stdout)
    assert view["path"] == str(path) and view["exists"]
    assert view["config"]["owner"] == "alice@example.com"
    assert view["effective"] == {"owner": "alice@example.com", "namespace": "dev-alice",
                                 "namespaceSource": "config"}
    bad = invoke(["config", "set-owner", "not-an-email"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ")
    assert invoke(["config", "set-namespace", "Bad_NS"]).exit_code == 2


def test_config_path_honours_xdg(tmp_path, monkeypatch):
    from devctl.config import config_path

    monkeypatch.delenv("DEVCTL_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "devctl" / "config.yaml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert str(config_path()).endswith(".config/devctl/config.yaml")


def test_invalid_config_file_is_an_error(tmp_path):
    (tmp_path / "devctl.yaml").write_text("- a list\n")
    result = invoke(["config", "view"])
    assert result.exit_code == 1 and "must hold a mapping" in result.stderr


# -- create: the object --------------------------------------------------------------------

def _dry_run(*args):
    result = invoke(["-n", "dev-alice", "create", *args, "--dry-run", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_create_dry_run_standalone_all_options(tmp_path):
    key = tmp_path / "k.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample alice@laptop\n")
    obj = _dry_run("my-dev", "--flavor", "gpu-a10g-1", "--owner", "alice@example.com",
                   "--image", "ghcr.io/acme/torch:2.5", "--home-size", "200Gi",
                   "--shared-claim", "alice-shared-efs", "--ssh-key-file", key,
                   "--env", "WANDB_MODE=offline", "--env", "A=b=c", "--idle-timeout", "2h",
                   "--auto-shutdown")
    assert obj == {
        "apiVersion": "torchdev.io/v1alpha1",
        "kind": "DevServer",
        "metadata": {"name": "my-dev", "namespace": "dev-alice"},
        "spec": {
            "owner": "alice@example.com",
            "flavor": "gpu-a10g-1",
            "image": "ghcr.io/acme/torch:2.5",
            "mode": "standalone",
            "persistentHomeSize": "200Gi",
            "sharedVolumeClaimName": "alice-shared-efs",
            "sshPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample alice@laptop"],
            "env": [{"name": "WANDB_MODE", "value": "offline"}, {"name": "A", "value": "b=c"}],
            "lifecycle": {"idleTimeout": 7200, "autoShutdown": True},
        },
    }


def test_create_dry_run_minimal_leaves_defaults_to_the_crd():
    obj = _dry_run("x", "--flavor", "cpu-small", "--owner", "a@b.io")
    assert obj["spec"] == {"owner": "a@b.io", "flavor": "cpu-small", "mode": "standalone"}


def test_create_dry_run_distributed():
    obj = _dry_run("train", "--flavor", "gpu-h100-8", "--owner", "a@b.io", "--distributed",
                   "--replicas", "4", "--nprocs-per-node", "8", "--backend", "gloo")
    assert obj["spec"]["mode"] == "distributed"
    assert obj["spec"]["distributed"] == {"worldSize": 32, "nprocsPerNode": 8, "backend": "gloo"}
    obj = _dry_run("train", "--flavor", "gpu-h100-8", "--owner", "a@b.io", "--distributed", "--replicas", "2")
    assert obj["spec"]["distributed"] == {"worldSize": 2, "nprocsPerNode": 1, "backend": "nccl"}


def test_create_default_ssh_keys_and_owner_from_config(isolated_env):
    ssh_dir = isolated_env / ".ssh"
    ssh_dir.mkdir()
    (ssh_dir / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey1 me\n")
    (ssh_dir / "id_rsa.pub").write_text("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABKey2 me\n")
    (ssh_dir / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert invoke(["config", "set-owner", "carol@example.com"]).exit_code == 0
    result = invoke(["create", "x", "--flavor", "f", "--dry-run", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    obj = json.loads(result.stdout)
    assert obj["spec"]["owner"] == "carol@example.com"
    assert obj["metadata"]["namespace"] == "dev-carol"
    assert obj["spec"]["sshPublicKeys"] == ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey1 me",
                                            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABKey2 me"]


def test_create_dry_run_yaml_by_default():
    result = invoke(["-n", "ns1", "create", "x", "--flavor", "f", "--owner", "a@b.io", "--dry-run"])
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["kind"] == "DevServer"
    assert "no SSH public key" in result.stderr


@pytest.mark.parametrize("args", [
    ["BadName", "--flavor", "f"],
    ["x", "--flavor", "f", "--replicas", "2"],
    ["x", "--flavor", "f", "--distributed"],
    ["x", "--flavor", "f", "--env", "NOVALUE"],
    ["x", "--flavor", "f", "--home-size", "lots"],
    ["x", "--flavor", "f", "--idle-timeout", "8d"],
    ["x", "--flavor", "f", "--owner", "nobody"],
    ["x", "--flavor", "f", "--ssh-key-file", "/nonexistent.pub"],
    ["x", "--flavor", "f", "--distributed", "--replicas", "512", "--nprocs-per-node", "4"],
])
def test_create_usage_errors(args):
    result = invoke(["-n", "ns1", "create", *args, "--owner", "a@b.io", "--dry-run"]
                    if "--owner" not in args else ["-n", "ns1", "create", *args, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ")


def test_create_rejects_private_key(tmp_path):
    key = tmp_path / "id"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    result = invoke(["-n", "n", "create", "x", "--flavor", "f", "--owner", "a@b.io",
                     "--ssh-key-file", key, "--dry-run"])
    assert result.exit_code == 2 and "private key" in result.stderr


def test_create_without_owner_is_usage_error():
    result = invoke(["-n", "n", "create", "x", "--flavor", "f", "--dry-run"])
    assert result.exit_code == 2 and "owner" in result.stderr


# -- output helpers ------------------------------------------------------------------------------

@pytest.mark.parametrize("seconds,expected", [
    (5, "5s"), (119, "119s"), (300, "5m"), (330, "5m30s"), (45 * 60, "45m"),
    (4 * 3600 + 60 * 5, "4h5m"), (20 * 3600, "20h"), (2 * 86400, "2d"), (3 * 86400 + 7200, "3d2h"),
    (40 * 86400, "40d"), (3 * 365 * 86400, "3y"), (-5, "0s"),
])
def test_human_duration(seconds, expected):
    from devctl.output import human_duration

    assert human_duration(seconds) == expected


def test_age_and_parse_time():
    from devctl.output import age, parse_time

    ref = datetime(2026, 1, 3, tzinfo=timezone.utc)
    assert age("2026-01-01T00:00:00Z", ref) == "2d"
    assert age((ref - timedelta(minutes=5)).isoformat(), ref) == "5m"
    assert age(None) == "<unknown>"
    assert parse_time("2026-01-01T00:00:00.123456Z").microsecond == 123456


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("2d", 172800),
                                          ("1.5h", 5400), ("1d12h", 129600), ("1.5", 1.5), ("500ms", 0.5)])
def test_parse_duration(text, seconds):
    from devctl.output import parse_duration

    assert parse_duration(text) == seconds


def test_parse_duration_rejects_garbage():
    from devctl.output import parse_duration

    for bad in ("", "5x", "m", "10 5"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_format_table_is_kubectl_like():
    from devctl.output import format_table

    text = format_table(["name", "ready"], [["a", "1/1"], ["longer-name", "0/1"]])
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "READY"]
    assert lines[2].split() == ["longer-name", "0/1"]
    assert all(line == line.rstrip() for line in lines)
    assert "\x1b[" not in text  # no colour


@pytest.mark.parametrize("spec,gpus", [
    ({}, 0),
    ({"gpu": {"type": "nvidia-a10g", "count": 1}}, 1),
    ({"resources": {"limits": {"nvidia.com/gpu": 2}}}, 2),          # seed 000's gpu-large form
    ({"resources": {"requests": {"nvidia.com/gpu": "4"}}}, 4),
    ({"gpu": {"count": 8}, "resources": {"limits": {"nvidia.com/gpu": 8}}}, 8),
])
def test_flavor_gpu_count(spec, gpus):
    from devctl.flavor import gpu_count

    assert gpu_count({"metadata": {"name": "f"}, "spec": spec}) == gpus


@pytest.mark.parametrize("value,ok", [("100Gi", True), (".5Gi", True), ("1e3", True), ("1.5Ti", True),
                                      ("100GB", False), ("lots", False)])
def test_quantities_are_checked_the_operators_way(tmp_path, value, ok):
    """devctl accepts exactly the quantities the operator does (module_utils/quantity.py),
    in every option that takes one."""
    key = tmp_path / "k.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample a@b\n")
    create = invoke(["create", "box", "--flavor", "f", "--owner", "a@b.c", "--ssh-key-file", str(key),
                     "--home-size", value, "--dry-run", "-o", "json"])
    onboard = invoke(["admin", "onboard", "ann", "--email", "a@b.c", "--cpu", value, "--dry-run=client", "-o", "json"])
    for result in (create, onboard):
        assert (result.exit_code == 0) is ok, result.stderr
