#!/usr/bin/env python3
"""`make demo`: a DevServer from nothing to Ready, then stop what we started.

Cluster (--cluster): the embedded simulator (kubesim) with a GPU node pool, unless $KUBECONFIG
is set and answers (auto, the default). On kubesim everything goes away with it: it installs
the CRDs, runs the operator with the local runtime and watches.yaml, creates the sample flavors
and a standalone DevServer, waits for Ready, shows `devctl list` and `devctl get`.

`--cluster real` (`make demo CLUSTER=real`) does the same on the real control plane of the test
tier (hack/cluster/stack.py: kube-apiserver, etcd, kube-controller-manager, kube-scheduler and
kwok's nodes, built by `make cluster-build`) with the real ansible-operator (`make
operator-build`; the image's Python, the operator's own ServiceAccount and config/rbac), and
stops them at the end.

On a real cluster the demo first says what it will create and asks (or needs --yes, and
refuses without a terminal), and then touches only what it creates:

* the CRDs that are not installed yet (`kubectl create`: an installed CRD is used as it is);
* the flavor, only when the cluster has none of that name: a copy of the sample under a name
  of its own (<namespace>-<flavor>), labelled torchdev.io/demo=<namespace>;
* a namespace of its own (torchdev-demo-<random>) with the DevServer;
* the operator on this machine with a watches file of its own (.demo/watches.yaml): the
  DevServer watch (narrowed to its namespace by --namespace) and the DevServerFlavor watch
  narrowed by a label selector to the flavor it created; no DevUser or TrainingJob watch.

When it ends, or on SIGINT or SIGTERM, it removes what it created unless --keep, in the order
that lets it go: the namespace and the flavor while the operator still runs (the DevServer's
finalizer needs it), then the operator, then the CRDs it installed.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
# The node pools the sample flavors select (cpu, g5.2xlarge, p5.48xlarge).
NODES = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
SIM_NAMESPACE = "dev-demo"
SERVER = "demo"
DEFAULT_FLAVOR = "gpu-a10g-1"
CRD_DIR = ROOT / "config" / "crd" / "bases"
SAMPLES = ROOT / "config" / "samples"
FLAVORS = "devserverflavors.torchdev.io"
# On a real cluster: the label of the flavor the demo creates (value: the demo's namespace),
# which its operator's flavor watch selects.
DEMO_LABEL = "torchdev.io/demo"
# The watches (of watches.yaml) the demo's operator runs on a real cluster.
DEMO_KINDS = ("DevServer", "DevServerFlavor")


def step(msg: str) -> None:
    print(f"\n==> {msg}", flush=True)


def run(*cmd: str, env: dict[str, str], check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    """A child in a session of its own: a ^C on the terminal reaches the demo only, which
    then removes what it created (the children it needs for that keep running)."""
    if not quiet:
        print("$ " + " ".join(c if " " not in c else repr(c) for c in cmd), flush=True)
    return subprocess.run(cmd, env=env, check=check, text=True, start_new_session=True,
                          stdout=subprocess.PIPE if quiet else None,
                          stderr=subprocess.STDOUT if quiet else None)


def kubectl(*args: str, env: dict[str, str], check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    return run(str(BIN / "kubectl"), *args, env=env, check=check, quiet=quiet)


def cluster_reachable(env: dict[str, str]) -> bool:
    if not env.get("KUBECONFIG"):
        return False
    r = subprocess.run([str(BIN / "kubectl"), "version", "--request-timeout=3s", "-o", "json"],
                       env=env, capture_output=True, text=True)
    return r.returncode == 0


def crd_files() -> dict[str, pathlib.Path]:
    """The CRDs of config/crd/bases by name."""
    return {d["metadata"]["name"]: p for p in sorted(CRD_DIR.glob("*.yaml"))
            for d in yaml.safe_load_all(p.read_text()) if d}


def crds() -> list[str]:
    return sorted(crd_files())


def flavor_files() -> dict[str, pathlib.Path]:
    return {yaml.safe_load(p.read_text())["metadata"]["name"]: p
            for p in sorted(SAMPLES.glob("torchdev_v1alpha1_devserverflavor*.yaml"))}


def existing(kind: str, names: list[str], env: dict[str, str]) -> set[str]:
    """Which of ``names`` (cluster-scoped ``kind``) exist; a kind that is not served has none."""
    r = subprocess.run([str(BIN / "kubectl"), "get", kind, "-o", "json", "--ignore-not-found"],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return set()
    return {i["metadata"]["name"] for i in json.loads(r.stdout).get("items", [])} & set(names)


@dataclass
class Plan:
    """What the demo creates on a real cluster. ``flavor`` is the DevServer's flavor: the
    demo's copy of the sample ``sample`` when ``flavors`` names it, else one that exists."""
    context: str
    namespace: str
    flavor: str
    crds: list[str] = field(default_factory=list)
    flavors: list[str] = field(default_factory=list)
    sample: str = ""

    def describe(self) -> str:
        selector = f"{DEMO_LABEL}={self.namespace}"
        lines = [f"make demo is about to create, on the cluster of $KUBECONFIG ({self.context}):"]
        lines.append("  CustomResourceDefinitions (cluster-wide): " + (
            ", ".join(self.crds) + (" (the others are installed already: used as they are, not changed)"
                                    if len(self.crds) < len(crds()) else "")
            if self.crds else "none (installed already: used as they are, not changed)"))
        if self.flavors:
            lines.append(f"  DevServerFlavor (cluster-wide): {', '.join(self.flavors)}, a copy of the sample "
                         f"{self.sample} labelled {selector} (with Kueue the operator adds the Kueue "
                         "ResourceFlavor of the same name, owned by it)")
        else:
            lines.append(f"  DevServerFlavor: none ({self.flavor} exists already: used as it is, not changed)")
        lines.append(f"  namespace {self.namespace} (its own) with the DevServer {SERVER!r} of flavor {self.flavor} "
                     "(a StatefulSet, Services, a home PVC; it needs a node that fits the flavor)")
        lines.append(f"and run the operator on this machine (torchdev-runtime) with two watches only: DevServers "
                     f"in the namespace {self.namespace}, and DevServerFlavors labelled {selector}; no DevUser or "
                     "TrainingJob watch, nothing else is reconciled. The metrics exporter only reads.")
        lines.append("It removes exactly these when it ends or is interrupted (unless --keep): the namespace and "
                     "the flavor while the operator runs, then the operator, then the CRDs. Nothing that existed "
                     "before is changed.")
        return "\n".join(lines)


def plan_for(env: dict[str, str], flavor: str) -> Plan:
    ctx = subprocess.run([str(BIN / "kubectl"), "config", "current-context"], env=env,
                         capture_output=True, text=True).stdout.strip() or "current context"
    namespace = f"torchdev-demo-{secrets.token_hex(3)}"
    plan = Plan(context=ctx, namespace=namespace, flavor=flavor,
                crds=[n for n in crds() if n not in existing("crd", crds(), env)])
    if flavor not in existing(FLAVORS, [flavor], env):
        if flavor not in flavor_files():
            raise SystemExit(f"error: --flavor {flavor}: the cluster has no DevServerFlavor {flavor} and "
                             f"config/samples has none of that name ({', '.join(flavor_files())})")
        plan.sample, plan.flavor = flavor, f"{namespace}-{flavor}"
        plan.flavors = [plan.flavor]
    return plan


def confirm(plan: Plan, yes: bool, interactive: bool, ask=input) -> None:
    """Raises SystemExit unless the user agrees (--yes, or 'y' on a terminal)."""
    print(plan.describe(), flush=True)
    if yes:
        return
    if not interactive:
        raise SystemExit("error: refusing to install into a real cluster without confirmation (stdin is not a "
                         "terminal): run `make demo DEMO_ARGS=--yes` to agree, or unset KUBECONFIG to use the "
                         "embedded simulator")
    if ask("Proceed? [y/N] ").strip().lower() not in ("y", "yes"):
        raise SystemExit("aborted: nothing was created")


@dataclass
class Created:
    """What the demo has created on a real cluster so far: what it removes."""
    crds: list[str] = field(default_factory=list)
    flavors: list[str] = field(default_factory=list)
    namespace: str = ""


def demo_watches(namespace: str) -> list[dict]:
    """watches.yaml's DevServer and DevServerFlavor watches, the flavor watch narrowed by a label
    selector to the flavor the demo creates (ansible-operator's `selector`). The DevServer role
    writes in its DevServer's namespace only; the flavor role writes its flavor's status, the
    flavor-hash annotation of the DevServers using it (the demo's own: the name is the demo's)
    and, with Kueue, the ResourceFlavor of the same name."""
    out = []
    for watch in yaml.safe_load((ROOT / "watches.yaml").read_text()):
        if watch["kind"] in DEMO_KINDS:
            if watch["kind"] == "DevServerFlavor":
                watch = dict(watch, selector={"matchLabels": {DEMO_LABEL: namespace}})
            out.append(watch)
    return out


def install(plan: Plan, created: Created, workdir: pathlib.Path, env: dict[str, str]) -> None:
    """The CRDs that are missing (created, never applied over an existing one) and the demo's
    copy of the flavor, recorded as they are created."""
    files = crd_files()
    for name in plan.crds:
        kubectl("create", "-f", str(files[name]), env=env)
        created.crds.append(name)
    kubectl("wait", "--for=condition=Established", "--timeout=30s", *(f"crd/{n}" for n in crds()), env=env)
    if plan.flavors:
        flavor = yaml.safe_load(flavor_files()[plan.sample].read_text())
        flavor["metadata"] = {"name": plan.flavor, "labels": {DEMO_LABEL: plan.namespace}}
        path = workdir / "flavor.yaml"
        path.write_text(yaml.safe_dump(flavor))
        kubectl("create", "-f", str(path), env=env)
        created.flavors.append(plan.flavor)


def remove(created: Created, operator: subprocess.Popen | None, env: dict[str, str], timeout: int) -> None:
    """Delete what the demo created on a real cluster, in the order that lets it go: the namespace
    (its DevServer's finalizer runs in the operator) and the flavor while the operator runs, wait
    until they are gone, stop the operator, then delete the CRDs it installed. Without a running
    operator the demo's own DevServer is released (its finalizer removed) instead."""
    ns, gone = created.namespace, [f"{FLAVORS}/{f}" for f in created.flavors]
    if ns:
        kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", env=env, check=False)
        gone.append(f"namespace/{ns}")
        if operator is None or operator.poll() is not None:
            print("the operator is not running: releasing the demo's DevServer (its finalizer)")
            kubectl("-n", ns, "patch", f"devservers.torchdev.io/{SERVER}", "--type=merge", "-p",
                    '{"metadata":{"finalizers":null}}', env=env, check=False, quiet=True)
    if created.flavors:
        # foreground: the flavor goes after its Kueue ResourceFlavor (owned by it), so the wait covers both
        kubectl("delete", FLAVORS, *created.flavors, "--ignore-not-found", "--cascade=foreground", "--wait=false",
                env=env, check=False)
    waited = not gone or kubectl("wait", "--for=delete", f"--timeout={timeout}s", *gone, env=env,
                                 check=False).returncode == 0
    stop(operator, "operator")
    if not waited:
        print(f"warning: still there after {timeout}s: {' '.join(gone)} (see `kubectl get {' '.join(gone)}`)"
              + (f"; so the CRDs {', '.join(created.crds)} are left too: delete them once those are gone"
                 if created.crds else ""), file=sys.stderr)
        return
    if created.crds:
        kubectl("delete", "crd", *created.crds, "--ignore-not-found", f"--timeout={timeout}s", env=env,
                check=False)


def _interrupt(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def _cleaning_up(signum: int, _frame) -> None:
    print(f"\n({signal.Signals(signum).name}: the demo is removing what it created; it exits when done)",
          file=sys.stderr, flush=True)


def start_kubesim(workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "--port", "0",
                             "--kubeconfig", str(kubeconfig), "--nodes", NODES],
                            stdout=open(workdir / "kubesim.log", "w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            print((workdir / "kubesim.log").read_text(), file=sys.stderr)
            raise SystemExit("error: kubesim did not start")
        time.sleep(0.05)
    return proc, str(kubeconfig)


def tool_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the demo's (and the playground's) children: ansible.cfg, and this
    virtualenv's bin first on PATH (kubectl, devctl, torchdev-runtime, torchdev-exporter)."""
    env = dict(os.environ if base is None else base)
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def install_crds(env: dict[str, str], quiet: bool = False) -> None:
    """torchdev's CRDs (config/crd, server-side apply), waited for until Established."""
    kubectl("apply", "--server-side", "-k", str(ROOT / "config" / "crd"), env=env, quiet=quiet)
    kubectl("wait", "--for=condition=Established", "--timeout=30s", *(f"crd/{n}" for n in crds()), env=env,
            quiet=quiet)


def apply_sample_flavors(env: dict[str, str], quiet: bool = False) -> None:
    """The sample DevServerFlavors of config/samples."""
    for path in flavor_files().values():
        kubectl("apply", "--server-side", "-f", str(path), env=env, quiet=quiet)


def start_exporter(workdir: pathlib.Path, port: int, env: dict[str, str]) -> subprocess.Popen:
    """torchdev-exporter on 127.0.0.1:``port``, plain HTTP (--insecure-loopback), its log in
    ``workdir``/exporter.log, in a session of its own."""
    return subprocess.Popen([str(BIN / "torchdev-exporter"), "--kubeconfig", env["KUBECONFIG"],
                             "--address", "127.0.0.1", "--insecure-loopback", "--port", str(port)],
                            env=env, stdout=open(workdir / "exporter.log", "w"),
                            stderr=subprocess.STDOUT, cwd=ROOT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def stop(proc: subprocess.Popen | None, name: str) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        print(f"{name} did not stop in time; killing it", file=sys.stderr)
        proc.kill()
        proc.wait()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", choices=("auto", "kubesim", "real"), default="auto",
                    help="auto: the cluster in $KUBECONFIG when it answers, else kubesim; kubesim: the embedded "
                         "simulator; real: the real control plane and ansible-operator started here (make "
                         "cluster-build operator-build); default %(default)s")
    ap.add_argument("--keep", action="store_true", help="leave the cluster, operator and demo objects in place")
    ap.add_argument("--yes", action="store_true",
                    help="on a real cluster ($KUBECONFIG): agree to what the demo will create without asking")
    ap.add_argument("--flavor", default=DEFAULT_FLAVOR,
                    help="the DevServer's flavor (default %(default)s): on a real cluster one that exists, "
                         "else a copy of the sample of that name")
    ap.add_argument("--timeout", type=int, help="seconds to wait for Ready (default 120, with --cluster real 300)")
    ap.add_argument("--cleanup-timeout", type=int, default=300,
                    help="on a real cluster: seconds to wait for the namespace and flavor to be gone")
    ap.add_argument("--workdir", type=pathlib.Path, default=ROOT / ".demo",
                    help="logs, kubeconfig and files of the demo (default .demo; emptied first)")
    args = ap.parse_args(argv)
    if args.cluster == "real" and args.keep:
        ap.error("--keep needs a cluster that outlives the demo: start one with `make cluster`, export its "
                 "KUBECONFIG and run the demo there")
    if args.timeout is None:
        args.timeout = 300 if args.cluster == "real" else 120
    return args


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def show_metrics(port: int, runtime_port: int) -> None:
    """The exporter's DevServer and GPU series (it watches the cluster; a scrape is instant) and
    the operator's DevServer reconciles."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{runtime_port}/metrics", timeout=5) as response:
            print("\n".join(line for line in response.read().decode().splitlines()
                            if line.startswith('controller_runtime_reconcile_total{controller="devserver-controller"')))
    except OSError as exc:
        print(f"(the operator's reconcile metrics: {exc})")

    for _ in range(50):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            time.sleep(0.2)
            continue
        lines = [line for line in text.splitlines()
                 if line.startswith(("torchdev_devservers{", "torchdev_gpus_requested{", "torchdev_cost_per_hour"))]
        if any(line.startswith("torchdev_devservers{") and 'phase="Running"' in line for line in lines):
            print("\n".join(lines))
            return
        time.sleep(0.2)
    print("(the exporter has not reported the server yet; see .demo/exporter.log)")


def start_operator(workdir: pathlib.Path, namespace: str | None, metrics_port: int,
                   env: dict[str, str]) -> subprocess.Popen:
    """torchdev-runtime with watches.yaml, or on a real cluster (``namespace``) the demo's own
    watches (demo_watches) and --namespace."""
    watches = ROOT / "watches.yaml"
    if namespace:
        watches = workdir / "watches.yaml"
        watches.write_text(yaml.safe_dump(demo_watches(namespace), sort_keys=False))
    return subprocess.Popen([str(BIN / "torchdev-runtime"), "--watches-file", str(watches),
                             "--kubeconfig", env["KUBECONFIG"],
                             "--metrics-bind-address", f"127.0.0.1:{metrics_port}"]
                            + (["--namespace", namespace] if namespace else []),
                            env=env, stdout=open(workdir / "operator.log", "w"),
                            stderr=subprocess.STDOUT, cwd=ROOT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


class RealOperator:
    """The real ansible-operator (hack/ansible_operator): its log and metrics port, `stop()`."""

    def __init__(self, kubeconfig: str, workdir: pathlib.Path):
        from hack.ansible_operator.run import AnsibleOperator

        self.operator = AnsibleOperator(kubeconfig, workdir).start()
        self.log = self.operator.log_path
        self.metrics_port = self.operator.metrics_port

    def stop(self) -> None:
        self.operator.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = tool_env()
    workdir = args.workdir.resolve()
    env.setdefault("DEVCTL_CONFIG", str(workdir / "devctl.yaml"))
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    sim = operator = exporter = plan = created = stack = None
    kept = False
    operator_log = workdir / "operator.log"
    namespace = SIM_NAMESPACE
    flavor = args.flavor
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)  # SystemExit(128 + signal): the finally below cleans up
    try:
        if args.cluster == "real":
            from hack.cluster.stack import Stack  # python -m hack.demo (make demo): the repository on sys.path

            step("Starting the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
                 "kwok's nodes), its storage, the CRDs and the sample flavors")
            t0 = time.monotonic()
            stack = Stack(workdir / "real", NODES)
            try:
                stack.up()
            except Exception as err:  # noqa: BLE001 - one line, then the finally stops what started
                raise SystemExit(f"error: the real control plane did not start ({err}); run `make cluster-build` "
                                 f"first; logs in {workdir / 'real' / 'cluster' / 'logs'}") from None
            env["KUBECONFIG"] = stack.kubeconfig
            print(f"control plane ready in {time.monotonic() - t0:.1f}s; KUBECONFIG={stack.kubeconfig}")
            kubectl("get", "nodes", "-L", "node.kubernetes.io/instance-type", env=env)
        elif args.cluster == "auto" and cluster_reachable(env):
            step(f"Using the cluster in $KUBECONFIG ({env['KUBECONFIG']})")
            proposed = plan_for(env, args.flavor)
            confirm(proposed, args.yes, sys.stdin.isatty())
            plan, namespace, flavor, created = proposed, proposed.namespace, proposed.flavor, Created()
        else:
            step("No cluster configured: starting the embedded simulator (kubesim) with a GPU node pool")
            t0 = time.monotonic()
            sim, kubeconfig = start_kubesim(workdir)
            env["KUBECONFIG"] = kubeconfig
            print(f"kubesim ready in {time.monotonic() - t0:.2f}s; KUBECONFIG={kubeconfig}")
            kubectl("get", "nodes", "-L", "node.kubernetes.io/instance-type", env=env)

        if plan:
            step("Installing the CRDs that are missing and the demo's flavor")
            install(plan, created, workdir, env)
        else:
            step("Installing the CRDs")
            install_crds(env)

        if stack:
            step("Starting the real ansible-operator (the image's Python, watches.yaml -> roles/, its own "
                 "ServiceAccount and config/rbac)")
            operator = RealOperator(env["KUBECONFIG"], workdir / "operator")
            operator_log, runtime_metrics_port = operator.log, operator.metrics_port
            print(f"reconcile metrics on http://127.0.0.1:{runtime_metrics_port}/metrics; log {operator_log}")
        else:
            runtime_metrics_port = free_port()
            step("Starting the operator (local runtime; "
                 + (f"the demo's watches {workdir / 'watches.yaml'}, namespace {namespace}" if plan
                    else "watches.yaml -> roles/")
                 + f"; reconcile metrics on http://127.0.0.1:{runtime_metrics_port}/metrics)")
            operator = start_operator(workdir, namespace if plan else None, runtime_metrics_port, env)

        metrics_port = free_port()
        step(f"Starting the metrics exporter (torchdev-exporter, http://127.0.0.1:{metrics_port}/metrics)")
        exporter = start_exporter(workdir, metrics_port, env)

        if plan:
            step("Creating a namespace of the demo's own")
        else:
            step("Creating the sample flavors and a namespace for the user")
            apply_sample_flavors(env)
        kubectl("create", "namespace", namespace, env=env)
        if created:
            created.namespace = namespace
        run(str(BIN / "devctl"), "flavors", env=env)

        step(f"Creating a standalone DevServer '{SERVER}' and waiting for Ready")
        t0 = time.monotonic()
        key = workdir / "id_ed25519.pub"
        key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoKeyForTorchdevDemoOnlyxxxxxxxxxxxx demo@torchdev\n")
        r = run(str(BIN / "devctl"), "-n", namespace, "create", SERVER, "--flavor", flavor,
                "--owner", "demo@example.com", "--ssh-key-file", str(key), "--wait",
                "--timeout", str(args.timeout), env=env, check=False)
        if r.returncode != 0:
            print("\n--- operator log (tail) ---", file=sys.stderr)
            print("".join(operator_log.read_text().splitlines(True)[-60:]), file=sys.stderr)
            return 1
        print(f"Ready in {time.monotonic() - t0:.1f}s")

        step("devctl list")
        run(str(BIN / "devctl"), "-n", namespace, "list", env=env)
        step(f"devctl get {SERVER}")
        run(str(BIN / "devctl"), "-n", namespace, "get", SERVER, env=env)
        step("What the operator created")
        kubectl("-n", namespace, "get", "statefulsets,services,pvc,pods", env=env)
        step(f"devctl ssh {SERVER} --print")
        run(str(BIN / "devctl"), "-n", namespace, "ssh", SERVER, "--print", env=env, check=False)
        step("torchdev's metrics (a few of them)")
        show_metrics(metrics_port, runtime_metrics_port)
        if args.keep:
            print(f"\nLeft running (--keep): the DevServer {SERVER} in namespace {namespace}; the operator is pid "
                  f"{operator.pid}" + (f", exporter pid {exporter.pid}" if exporter else "")
                  + (f", kubesim pid {sim.pid}" if sim else ""))
            print(f"Point devctl and kubectl at it:\n  export KUBECONFIG={env['KUBECONFIG']} "
                  f"DEVCTL_CONFIG={env['DEVCTL_CONFIG']}\n  {BIN / 'devctl'} -n {namespace} get {SERVER}")
            if created:
                print(f"To remove what the demo created: kubectl delete namespace {namespace} (and wait, with the "
                      "operator still running: the DevServer's finalizer needs it), then stop the operator"
                      + "".join(f", kubectl delete {FLAVORS} {f}" for f in created.flavors)
                      + (f", kubectl delete crd {' '.join(created.crds)}" if created.crds else ""))
            sim = operator = exporter = created = None
            kept = True
        return 0
    except SystemExit as exc:
        if isinstance(exc.code, int) and exc.code > 128:
            print(f"\ninterrupted ({signal.Signals(exc.code - 128).name})", file=sys.stderr, flush=True)
        raise
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _cleaning_up)
        if not kept:
            step("Stopping what the demo started" + (" and removing what it created" if created else ""))
        stop(exporter, "exporter")
        if created is not None:
            remove(created, operator, env, args.cleanup_timeout)
        if isinstance(operator, RealOperator):
            operator.stop()
        else:
            stop(operator, "operator")
        stop(sim, "kubesim")
        if stack:
            stack.down()
        print("done")


if __name__ == "__main__":
    sys.exit(main())
