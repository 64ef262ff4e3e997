"""An image without sshd: the DevServer entrypoint, rendered by the devserver role, runs for
real with a ``devserver_sshd`` path that does not exist and a temporary termination log
(the role's ``devserver_termination_log``): it exits with IMAGE_LACKS_SSH_EXIT_CODE before it
writes anything, the termination log holds the one-line message the operator reports as
Degraded ImageLacksSSH (plugins/module_utils/devserver_status.image_lacks_ssh reads it back),
and the pod template points the kubelet at that file with FallbackToLogsOnError.  Only
``sh`` is needed (no OpenSSH).
"""
from __future__ import annotations

import os
import subprocess

import yaml
from ansible_collections.torchdev.operator.plugins.module_utils import devserver_status
from ansible_collections.torchdev.operator.plugins.module_utils.constants import IMAGE_LACKS_SSH_EXIT_CODE

from _support import ROOT
from hack import render_manifests

IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def _container(base, **hostvars):
    flavor = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml").read_text())
    cr = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserver_standalone.yaml").read_text())
    cr["metadata"].update(namespace="dev-jane", uid="00000000-0000-0000-0000-000000000001", generation=1)
    cr["spec"].update(flavor="cpu-small", image=IMAGE)
    variables = dict(render_manifests.devserver_hostvars({"cr": cr, "flavor": flavor}), **hostvars)
    objects = render_manifests.render_roles(base, {"devserver": {"env": variables}})["devserver"]["env"]
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    return sts["spec"]["template"]["spec"]["containers"][0]


def _run(container, env):
    return subprocess.run(["/bin/sh", "-c", container["args"][-1]], env=env, capture_output=True, text=True,
                          timeout=60)


def test_pod_template_points_the_kubelet_at_the_termination_log(tmp_path):
    container = _container(tmp_path)
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_entrypoint_without_sshd_exits_with_the_message(tmp_path):
    home, run, log = tmp_path / "home", tmp_path / "run", tmp_path / "termination-log"
    home.mkdir()
    run.mkdir()
    container = _container(tmp_path, devserver_home=str(home), devserver_run_dir=str(run),
                           devserver_sshd=str(tmp_path / "no" / "sshd"), devserver_termination_log=str(log))
    assert container["terminationMessagePath"] == str(log)
    result = _run(container, {"PATH": os.environ["PATH"]})
    assert result.returncode == IMAGE_LACKS_SSH_EXIT_CODE == 78, result
    message = log.read_text()
    expected = (f"torchdev: the image has no {tmp_path / 'no' / 'sshd'}: install openssh-server in it, "
                "use the torchdev devserver image, or set spec.enableSSH false\n")
    assert message == expected and result.stderr == expected
    # Stopped before anything else: no host key, no run directory content.
    assert not list(home.iterdir()) and not list(run.iterdir())
    # What the kubelet reports, read back by the operator.
    pod = {"metadata": {"name": "x-0"}, "status": {"containerStatuses": [
        {"name": "dev", "image": IMAGE, "ready": False, "restartCount": 1,
         "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": result.returncode, "message": message}}}]}}
    assert devserver_status.image_lacks_ssh(pod) == (
        f"image {IMAGE} has no {tmp_path / 'no' / 'sshd'}: install openssh-server in it, "
        "use the torchdev devserver image, or set spec.enableSSH false")


def test_entrypoint_without_ssh_keygen_names_both(tmp_path):
    home, run, log = tmp_path / "home", tmp_path / "run", tmp_path / "termination-log"
    home.mkdir()
    run.mkdir()
    bin_dir = tmp_path / "bin"  # a PATH with the shell's tools and no ssh-keygen
    bin_dir.mkdir()
    for tool in ("printf", "cat"):
        found = subprocess.run(["/bin/sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found.startswith("/"):
            (bin_dir / tool).symlink_to(found)
    container = _container(tmp_path, devserver_home=str(home), devserver_run_dir=str(run),
                           devserver_sshd="/nonexistent/sshd", devserver_termination_log=str(log))
    result = _run(container, {"PATH": str(bin_dir)})
    assert result.returncode == 78, result
    assert log.read_text().startswith("torchdev: the image has no /nonexistent/sshd and ssh-keygen: install ")


def test_unwritable_termination_log_still_exits_with_the_code(tmp_path):
    """FallbackToLogsOnError: the message is also the log's last line."""
    container = _container(tmp_path, devserver_home=str(tmp_path), devserver_run_dir=str(tmp_path / "run"),
                           devserver_sshd="/nonexistent/sshd",
                           devserver_termination_log=str(tmp_path / "missing" / "log"))
    result = _run(container, {"PATH": os.environ["PATH"]})
    assert result.returncode == 78 and result.stderr == ("torchdev: the image has no /nonexistent/sshd: install "
                                                        "openssh-server in it, use the torchdev devserver image, "
                                                        "or set spec.enableSSH false\n")
