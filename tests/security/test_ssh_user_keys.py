"""The keys a DevUser was onboarded with log in to the DevServers of its namespace (issue 27.1).

The DevUser role renders the Secret ``ssh-public-keys`` (authorized_keys from the DevUser's
spec.sshPublicKeys, what ``devctl admin onboard --ssh-key-file`` writes) and reports its name in
status.sshKeySecretName; the devserver role mounts that Secret where the rendered sshd
configuration reads it, unless spec.mountUserSSHKeys is false.  Both roles render for real
(hack/render_manifests.py); the Secret's file is put where the kubelet would mount it (the
volume's mountPath, moved under this test's directory); the rendered entrypoint starts Debian's
OpenSSH server with the configuration it writes (no AuthorizedKeysFile given from outside), and
a real ``ssh`` logs in with the onboarded key, or is refused for a server that opted out.

Needs ``sshd``, ``ssh`` and ``ssh-keygen`` (Debian: ``apt-get install openssh-server``;
``make deps``, which ``make test`` runs, installs it).
"""
from __future__ import annotations

import base64
import os
import pwd
import subprocess
from pathlib import Path

import pytest
import yaml

from _support import ROOT, free_port as _free_port, system_tool as _which
from hack import render_manifests
from test_ssh_session_env import entrypoint

API = "torchdev.io/v1alpha1"
SECRET_MOUNT = "/etc/torchdev/ssh-secret"  # where the rendered sshd_config reads the Secret's file


@pytest.fixture(scope="module")
def tools():
    return {name: _which(name) for name in ("sshd", "ssh", "ssh-keygen")}


@pytest.fixture(scope="module")
def onboarded(tmp_path_factory, tools):
    """A key pair, and the DevUser role's Secret for a DevUser onboarded with its public key."""
    base = tmp_path_factory.mktemp("userkeys")
    subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-C", "jane@laptop", "-f",
                    str(base / "id")], check=True)
    public = (base / "id.pub").read_text().strip()
    cr = {"apiVersion": API, "kind": "DevUser", "metadata": {"name": "jane", "uid": "00000000-0000-0000-0000-00000000000a"},
          "spec": {"email": "jane@example.com", "sshPublicKeys": [public]}}
    hostvars = render_manifests.devuser_hostvars({"cr": cr, "kueue": False, "flavors": []})
    (base / "devuser").mkdir()
    objects = render_manifests.render_roles(base / "devuser", {"devuser": {"jane": hostvars}})["devuser"]["jane"]
    [secret] = [o for o in objects if o["kind"] == "Secret"]
    return {"key": base / "id", "public": public, "secret": secret, "base": base}


def _server(onboarded, tools, name: str, secrets: dict | None = None, **spec) -> dict:
    """The rendered DevServer ``name`` in jane's namespace: the entrypoint, its environment, and
    its volume mounts with the Secret's (the onboarded one, or one of ``secrets``: name -> data)
    and the rendered ConfigMaps' content where the kubelet would put them."""
    base = onboarded["base"] / name
    home, run, mounts = base / "home", base / "run", base / "mounts"
    for directory in (home, run, mounts):
        directory.mkdir(parents=True)
    flavor = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml").read_text())
    cr = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserver_standalone.yaml").read_text())
    cr["metadata"].update(name=name, namespace="dev-jane", uid="00000000-0000-0000-0000-00000000000b", generation=1)
    cr["spec"].update(dict({"flavor": "cpu-small", "owner": "jane@example.com", "sshPublicKeys": []}, **spec))
    devuser = {"apiVersion": API, "kind": "DevUser", "metadata": {"name": "jane"},
               "status": {"namespace": "dev-jane", "sshKeySecretName": onboarded["secret"]["metadata"]["name"]}}
    port = _free_port()
    extra = ["-o", "PermitRootLogin=prohibit-password"] if os.geteuid() == 0 else []
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    sshd = base / "sshd"
    sshd.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (tools["sshd"], " ".join(extra)))
    sshd.chmod(0o755)
    hostvars = dict(render_manifests.devserver_hostvars({"cr": cr, "flavor": flavor, "devuser": devuser}),
                    devserver_home=str(home), devserver_run_dir=str(run), devserver_sshd=str(sshd),
                    devserver_ssh_port=port)
    objects = render_manifests.render_roles(base, {"devserver": {name: hostvars}})["devserver"][name]
    pod = next(o for o in objects if o["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    script = container["args"][-1]
    assert SECRET_MOUNT in script  # the rendered sshd_config reads the Secret's file there
    secrets = dict(secrets or {}, **{onboarded["secret"]["metadata"]["name"]: onboarded["secret"]["data"]})
    configmaps = {o["metadata"]["name"]: o.get("data") or {} for o in objects if o["kind"] == "ConfigMap"}
    mounted = {}
    # Longest path first: /etc/torchdev/ssh is a prefix of /etc/torchdev/ssh-secret.
    for mount in sorted(container["volumeMounts"], key=lambda m: -len(m["mountPath"])):
        volume = volumes.get(mount["name"], {})  # home: a volumeClaimTemplate
        secret, configmap = volume.get("secret"), volume.get("configMap")
        if secret:  # the kubelet: the Secret's items at the mountPath
            target = mounts / mount["name"]
            target.mkdir()
            for item in secret["items"]:
                (target / item["path"]).write_bytes(base64.b64decode(secrets[secret["secretName"]][item["key"]]))
            script = script.replace(mount["mountPath"], str(target))
            mounted[mount["mountPath"]] = secret
        elif configmap and mount["mountPath"].startswith("/etc/torchdev/ssh"):  # the inline keys
            target = mounts / mount["name"]
            target.mkdir()
            for key, value in configmaps[configmap["name"]].items():
                (target / key).write_text(value)
            script = script.replace(mount["mountPath"], str(target))
    env = {"PATH": os.environ["PATH"]}
    for item in container["env"]:
        env[item["name"]] = item.get("value", "0")  # downward-API values: any will do here
    env["PATH"] = env["PATH"] + ":" + os.environ["PATH"]
    return {"script": script, "env": env, "run": run, "port": port, "mounted": mounted}


def _ssh(tools, server, key) -> subprocess.CompletedProcess:
    user = pwd.getpwuid(os.geteuid()).pw_name
    return subprocess.run(
        [tools["ssh"], "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
         "-p", str(server["port"]), f"{user}@127.0.0.1", "echo", "logged-in"],
        capture_output=True, text=True, timeout=60)


def _login(onboarded, tools, server, *keys) -> subprocess.CompletedProcess | list[subprocess.CompletedProcess]:
    """ssh into the started server with the onboarded key, or with each of ``keys``."""
    with entrypoint(server):
        if not keys:
            return _ssh(tools, server, onboarded["key"])
        return [_ssh(tools, server, key) for key in keys]


def _key_pair(onboarded, tools, name: str) -> tuple:
    path = onboarded["base"] / ("key-" + name)
    subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
    return path, path.with_name(path.name + ".pub").read_text().strip()


def _logged_in(result) -> bool:
    return result.returncode == 0 and result.stdout.strip() == "logged-in"


def test_the_onboarded_key_logs_in_to_a_server_of_the_users_namespace(onboarded, tools):
    """No key in the DevServer's spec, no sshKeySecretRef: the DevUser's keys are accepted."""
    assert onboarded["public"] in base64.b64decode(onboarded["secret"]["data"]["authorized_keys"]).decode()
    server = _server(onboarded, tools, "plain")
    assert list(server["mounted"]) == [SECRET_MOUNT]
    assert server["mounted"][SECRET_MOUNT]["optional"] is True  # a Secret not written yet blocks no pod
    result = _login(onboarded, tools, server)
    assert result.returncode == 0 and result.stdout.strip() == "logged-in", result.stderr


def test_a_server_that_opts_out_refuses_the_onboarded_key(onboarded, tools):
    server = _server(onboarded, tools, "optout", mountUserSSHKeys=False)
    assert server["mounted"] == {}
    result = _login(onboarded, tools, server)
    assert result.returncode == 255 and "logged-in" not in result.stdout  # Permission denied (publickey)


def test_inline_keys_and_the_onboarded_keys_both_log_in(onboarded, tools):
    """The merge rule: spec.sshPublicKeys do not replace the DevUser's keys; sshd accepts both."""
    laptop, public = _key_pair(onboarded, tools, "inline")
    server = _server(onboarded, tools, "both", sshPublicKeys=[public])
    assert list(server["mounted"]) == [SECRET_MOUNT]
    inline, user = _login(onboarded, tools, server, laptop, onboarded["key"])
    assert _logged_in(inline), inline.stderr
    assert _logged_in(user), user.stderr


def test_an_explicit_key_secret_replaces_the_onboarded_keys(onboarded, tools):
    """spec.sshKeySecretRef (devctl create --ssh-key-secret) wins over the DevUser's Secret."""
    team, public = _key_pair(onboarded, tools, "team")
    data = {"id.pub": base64.b64encode((public + "\n").encode()).decode()}
    server = _server(onboarded, tools, "team", secrets={"team-keys": data},
                     sshKeySecretRef={"name": "team-keys", "key": "id.pub"})
    assert server["mounted"] == {SECRET_MOUNT: {"secretName": "team-keys", "defaultMode": 292,
                                                "items": [{"key": "id.pub", "path": "authorized_keys"}]}}
    own, user = _login(onboarded, tools, server, team, onboarded["key"])
    assert _logged_in(own), own.stderr
    assert user.returncode == 255 and "logged-in" not in user.stdout
