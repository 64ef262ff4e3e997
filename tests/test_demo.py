"""`make demo` (hack/demo.py).

Against a cluster in $KUBECONFIG (a kubesim stands in for it): it says what it will create and
asks, refuses without a terminal and without --yes, runs in a namespace of its own, touches
nothing that existed before (CRDs, DevUsers, flavors, other DevServers, Kueue ResourceFlavors:
same resourceVersions after), and removes exactly what it created, at its end and on SIGTERM,
in the order that lets it go (the namespace while its operator runs the DevServer's finalizer).

On the embedded simulator (no $KUBECONFIG) the demo is what `make demo` runs, end to end
(`make test`, hence .ci/run, runs it here).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys

import pytest
import yaml

from _support import ROOT, tool
from kubesim.testing import KubeSim, wait_for

from hack import demo
from torchdev_runtime.watches import parse_watches, selector_matches

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PLAN = demo.Plan(context="prod", namespace="torchdev-demo-abc123", flavor="torchdev-demo-abc123-cpu-small",
                 crds=["devservers.torchdev.io"], flavors=["torchdev-demo-abc123-cpu-small"], sample="cpu-small")


def test_confirm_with_yes_does_not_ask(capsys):
    demo.confirm(PLAN, yes=True, interactive=False, ask=lambda _: pytest.fail("asked"))
    out = capsys.readouterr().out
    assert "torchdev-demo-abc123" in out and "devservers.torchdev.io" in out and "cpu-small" in out


def test_confirm_refuses_without_a_terminal():
    with pytest.raises(SystemExit, match="DEMO_ARGS=--yes"):
        demo.confirm(PLAN, yes=False, interactive=False)


@pytest.mark.parametrize("answer,agreed", [("y", True), ("yes", True), ("n", False), ("", False)])
def test_confirm_asks_on_a_terminal(answer, agreed):
    if agreed:
        demo.confirm(PLAN, yes=False, interactive=True, ask=lambda _: answer)
    else:
        with pytest.raises(SystemExit, match="nothing was created"):
            demo.confirm(PLAN, yes=False, interactive=True, ask=lambda _: answer)


def test_the_plan_says_what_the_operator_watches():
    text = PLAN.describe()
    assert "DevServers in the namespace torchdev-demo-abc123" in text
    assert "DevServerFlavors labelled torchdev.io/demo=torchdev-demo-abc123" in text
    assert "no DevUser or TrainingJob watch" in text
    existing = demo.Plan(context="prod", namespace="torchdev-demo-abc123", flavor="gpu-a10g-1")
    assert "CustomResourceDefinitions (cluster-wide): none (installed already: used as they are, not changed)" \
        in existing.describe()
    assert "gpu-a10g-1 exists already: used as it is, not changed" in existing.describe()


def test_the_demo_operator_watches_its_own_objects_only():
    """The watches the demo's operator runs on a real cluster: DevServer (narrowed to its
    namespace by --namespace) and DevServerFlavor, selected by the demo's label; the file
    loads like watches.yaml (the same roles, finalizer, periods)."""
    watches = parse_watches(yaml.safe_dump(demo.demo_watches("torchdev-demo-abc123")), root_dir=str(ROOT),
                            environ={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")})
    assert [w.kind for w in watches] == ["DevServer", "DevServerFlavor"]
    server, flavor = watches
    assert server.selector == {} and server.finalizer_name == "torchdev.io/devserver-usage"
    assert flavor.selector == {"matchLabels": {"torchdev.io/demo": "torchdev-demo-abc123"}}
    assert selector_matches(flavor.selector, {"torchdev.io/demo": "torchdev-demo-abc123"})
    assert not selector_matches(flavor.selector, {})
    assert not selector_matches(flavor.selector, {"torchdev.io/demo": "torchdev-demo-other"})


def _kubectl(sim, *args):
    proc = subprocess.run([tool("kubectl"), "--kubeconfig", sim.kubeconfig, *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _items(sim, kind, *args):
    return json.loads(_kubectl(sim, "get", kind, *args, "-o", "json"))["items"]


def _names(sim, kind):
    return {i["metadata"]["name"] for i in _items(sim, kind)}


def _versions(sim, *kinds):
    """{(kind, namespace, name): resourceVersion} of every object of these kinds."""
    return {(kind, i["metadata"].get("namespace", ""), i["metadata"]["name"]): i["metadata"]["resourceVersion"]
            for kind in kinds for i in _items(sim, kind, "-A")}


def _demo_env(sim, tmp_path):
    return dict(os.environ, KUBECONFIG=sim.kubeconfig, DEVCTL_CONFIG=str(tmp_path / "devctl.yaml"))


def _demo(sim, tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "hack.demo", "--workdir", str(tmp_path / "demo"),
                           *args], env=_demo_env(sim, tmp_path), cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)


def _namespace_of(stdout):
    return re.search(r"namespace (torchdev-demo-[0-9a-f]{6}) \(its own\)", stdout).group(1)


def _assert_all_gone(sim, namespace):
    """Nothing of the demo is left: it waited for its namespace, flavor and CRDs to go."""
    assert namespace not in _names(sim, "namespaces")
    assert not [n for n in _names(sim, "crd") if n.endswith(".torchdev.io")]  # installed by it: removed


def test_on_the_embedded_simulator_it_runs_end_to_end(tmp_path):
    """What `make demo` runs without $KUBECONFIG: kubesim, the CRDs, the operator with
    watches.yaml, the sample flavors, a DevServer to Ready; then everything it started stops."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["DEVCTL_CONFIG"] = str(tmp_path / "devctl.yaml")
    proc = subprocess.run([sys.executable, "-m", "hack.demo", "--workdir", str(tmp_path / "demo")],
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "starting the embedded simulator (kubesim)" in proc.stdout and "Ready in" in proc.stdout
    assert "make demo is about to create" not in proc.stdout  # nothing to ask on its own simulator
    assert "torchdev_devservers{" in proc.stdout  # the exporter saw the server
    # kubesim stopped with the demo: its address answers no more
    kubeconfig = yaml.safe_load((tmp_path / "demo" / "kubeconfig").read_text())
    down = subprocess.run([tool("kubectl"), "--kubeconfig", str(tmp_path / "demo" / "kubeconfig"), "version",
                           "--request-timeout=5s"], capture_output=True, text=True)
    assert down.returncode != 0, kubeconfig["clusters"][0]["cluster"]["server"]


@pytest.fixture
def cluster():
    with KubeSim(nodes=demo.NODES) as sim:
        yield sim


def test_on_a_cluster_it_refuses_without_yes_and_creates_nothing(cluster, tmp_path):
    proc = _demo(cluster, tmp_path)
    assert proc.returncode != 0
    assert "refusing to install into a real cluster" in proc.stderr
    assert "CustomResourceDefinitions (cluster-wide): devserverflavors.torchdev.io" in proc.stdout
    assert not [n for n in _names(cluster, "crd") if n.endswith(".torchdev.io")]
    assert not [n for n in _names(cluster, "namespaces") if n.startswith("torchdev-demo-")]


def test_on_a_cluster_it_removes_what_it_created(cluster, tmp_path):
    proc = _demo(cluster, tmp_path, "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Ready in" in proc.stdout
    _assert_all_gone(cluster, _namespace_of(proc.stdout))


def test_on_a_cluster_it_removes_what_it_created_on_sigterm(cluster, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "hack.demo", "--workdir", str(tmp_path / "demo"),
                             "--yes"], env=_demo_env(cluster, tmp_path), cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "Creating a standalone DevServer" in line:
                break
        else:
            pytest.fail("the demo ended before creating its DevServer:\n" + "".join(seen[-40:]))
        namespace = _namespace_of("".join(seen))
        wait_for(lambda: _items(cluster, "devservers", "-n", namespace), 120,
                 message="the demo's DevServer is created")
        proc.send_signal(signal.SIGTERM)
        out = "".join(seen) + proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "interrupted (SIGTERM)" in out
    _assert_all_gone(cluster, namespace)


def test_on_a_cluster_it_changes_nothing_that_existed_before(tmp_path):
    with KubeSim(nodes=demo.NODES, kueue=True) as sim:
        for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
            _kubectl(sim, "apply", "--server-side", "-f", str(crd))
        _kubectl(sim, "wait", "--for=condition=Established", *(f"crd/{n}" for n in demo.crds()))
        # an admin's own changes to an installed CRD
        _kubectl(sim, "annotate", "crd/devservers.torchdev.io", "example.com/note=ours")
        _kubectl(sim, "patch", "crd/devservers.torchdev.io", "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema/description", "value": "ours"}]))
        # a user, a flavor and a server of someone else; an admin's Kueue ResourceFlavor
        _kubectl(sim, "apply", "--server-side", "-f", str(ROOT / "config" / "samples" / "torchdev_v1alpha1_devuser.yaml"))
        _kubectl(sim, "apply", "--server-side", "-f",
                 str(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_gpu-a10g-1.yaml"))
        _kubectl(sim, "create", "namespace", "team")
        _kubectl(sim, "-n", "team", "apply", "--server-side", "-f",
                 str(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserver_standalone.yaml"))
        rf = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "cpu-small"},
              "spec": {"nodeLabels": {"example.com/pool": "admins"}}}
        (tmp_path / "rf.yaml").write_text(yaml.safe_dump(rf))
        _kubectl(sim, "create", "-f", str(tmp_path / "rf.yaml"))
        _kubectl(sim, "create", "namespace", "dev-demo")  # someone's: not the demo's to use
        kinds = ("crd", "devusers.torchdev.io", "devserverflavors.torchdev.io", "devservers.torchdev.io",
                 "resourceflavors.kueue.x-k8s.io", "namespaces")
        before = _versions(sim, *kinds)

        proc = _demo(sim, tmp_path, "--yes", "--flavor", "cpu-small")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "none (installed already: used as they are, not changed)" in proc.stdout
        namespace = _namespace_of(proc.stdout)
        assert f"DevServerFlavor (cluster-wide): {namespace}-cpu-small" in proc.stdout
        # its own flavor was reconciled (the flavor watch selects it): the operator wrote its Kueue
        # ResourceFlavor, which went with it (the versions below)
        assert [r for r in sim.requests(20_000) if r["verb"] == "patch"
                and r["path"].endswith(f"/resourceflavors/{namespace}-cpu-small")]
        operator_log = (tmp_path / "demo" / "operator.log").read_text()
        assert "DevUser" not in operator_log and "TrainingJob" not in operator_log
        assert _versions(sim, *kinds) == before
        user = _items(sim, "devusers.torchdev.io")[0]
        assert not user["metadata"].get("finalizers") and "status" not in user
        assert "dev-jane" not in _names(sim, "namespaces")


def test_with_keep_it_says_where_the_server_is_and_stops_nothing(cluster, tmp_path):
    """`make demo DEMO_ARGS=--keep` (issue 28.10): the server, its namespace and the export line
    for devctl are printed; nothing is stopped (no "Stopping what the demo started"), and devctl
    pointed by that line finds the server Ready."""
    proc = _demo(cluster, tmp_path, "--yes", "--keep")
    pids = [int(p) for p in re.findall(r"(?:operator is pid|exporter pid) (\d+)", proc.stdout)]
    try:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "Stopping what the demo started" not in proc.stdout
        namespace = _namespace_of(proc.stdout)
        assert f"Left running (--keep): the DevServer {demo.SERVER} in namespace {namespace}" in proc.stdout
        export = re.search(r"^  export (KUBECONFIG=\S+) (DEVCTL_CONFIG=\S+)$", proc.stdout, re.M)
        devctl = re.search(rf"^  (\S+/devctl) -n {namespace} get {demo.SERVER}$", proc.stdout, re.M)
        assert export and devctl, proc.stdout[-1500:]
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{pid}") for pid in pids)  # still running
        env = dict(os.environ, **dict(kv.split("=", 1) for kv in export.groups()))
        got = subprocess.run([devctl.group(1), "-n", namespace, "get", demo.SERVER, "-o", "json"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["status"]["phase"] == "Running"
    finally:
        for pid in pids:  # each leads a session of its own (its ansible-playbook runs too)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
