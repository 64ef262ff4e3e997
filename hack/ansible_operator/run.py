#!/usr/bin/env python3
"""The real ansible-operator (issue 26.3), run as the operator image runs it, against a cluster.

    python -m hack.ansible_operator.run --kubeconfig ADMIN_KUBECONFIG [--workdir DIR]

* The binary: .cache/cluster/bin/ansible-operator, built by `make operator-build` from
  hack/ansible_operator/go.mod (ansible-operator-plugins v1.39.0, the base image's release).
* The image's HOME: laid out by hack/image.py from the Dockerfile (as `make test-image` does):
  the built torchdev.operator collection and kubernetes.core in HOME/.ansible/collections,
  watches.yaml in HOME, the working directory; .venv-image/bin first on PATH (ansible-core
  2.18, ansible-runner 2.4, ansible-runner-http, kubernetes 33.1.0); the Dockerfile's ENV;
  an empty ANSIBLE_CONFIG (the base image's own names only directories the collection does not use); the
  manager container's env of config/manager/manager.yaml (its /tmp paths under the work dir).
* The command: the base image's entrypoint, `ansible-operator run --watches-file=./watches.yaml`,
  with the manager container's args of config/manager/manager.yaml, except that leader election
  is off and the health and metrics ports are free loopback ports. The proxy port stays 8888:
  v1.39.0 hands ansible-runner a kubeconfig naming http://localhost:8888 whatever --proxy-port
  says (internal/ansible/controller/reconcile.go: `kubeconfig.Create(ownerRef,
  "http://localhost:8888", ...)`), so one real ansible-operator runs in a network namespace at a
  time: `AnsibleOperator.start` waits for PROXY_LOCK (an flock under TMPDIR) before it starts
  one. hack/isolate.py gives a command a namespace, a /tmp/ansible-operator and a TMPDIR of its
  own, so that real tiers run side by side.
* The identity: the operator's own ServiceAccount, never the admin. `operator_identity` applies
  config/default's Namespace, ServiceAccount and RBAC objects (kustomize, as `make deploy`
  renders them; not the Deployment) with the admin kubeconfig, asks the API server for a token
  of torchdev-system/torchdev-controller-manager (TokenRequest, `kubectl create token`) and writes
  a kubeconfig holding only that token: what config/rbac grants is all the operator can do.

One difference from a pod: ansible-operator writes its runner input under the fixed
/tmp/ansible-operator/runner/<group>/<version>/<kind>/<namespace>/<name> (runner.go), shared by
the operators of one mount namespace; tests give their objects unique names.
"""
from __future__ import annotations

import argparse
import base64
import fcntl
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import yaml

from hack.child import Child, Managed
from hack.cluster.control_plane import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "cluster" / "bin" / "ansible-operator"
IMAGE_VENV = ROOT / ".venv-image"
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
NAMESPACE = "torchdev-system"
SERVICE_ACCOUNT = "torchdev-controller-manager"
# The kinds `operator_identity` applies from config/default (the rest: CRDs, the Deployment).
IDENTITY_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# The Ansible configuration: an empty one, so that no ansible.cfg of this machine applies. The base
# image's /etc/ansible/ansible.cfg only names a roles directory and a module directory under /opt and
# /usr/share (ansible-operator-plugins images/ansible-operator/Dockerfile), which the collection,
# found by FQCN, does not use.
IMAGE_ANSIBLE_CFG = "[defaults]\n"
# The args of the manager container replaced here (the rest are passed as they are).
REPLACED_ARGS = ("--leader-elect", "--health-probe-bind-address", "--metrics-bind-address", "--proxy-port")
# The port ansible-runner's kubeconfig names (hard-coded in v1.39.0) and the lock that gives it to one operator.
PROXY_PORT = 8888
PROXY_LOCK = pathlib.Path(tempfile.gettempdir()) / ("torchdev-ansible-operator-%d.lock" % PROXY_PORT)


def manager_container() -> dict:
    """The `manager` container of config/manager/manager.yaml (its args and env)."""
    for doc in yaml.safe_load_all((ROOT / "config" / "manager" / "manager.yaml").read_text()):
        if doc and doc.get("kind") == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "manager":
                    return c
    raise ValueError("config/manager/manager.yaml has no manager container")


def operator_args(container: dict, health_port: int, metrics_port: int, proxy_port: int = PROXY_PORT,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """The command line: the image's entrypoint, the manager's args with the loopback ports and
    leader election off."""
    args = [a for a in container.get("args", []) if a.split("=", 1)[0] not in REPLACED_ARGS]
    return [str(BIN), "run", "--watches-file=./watches.yaml", *args, "--leader-elect=false",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}", f"--proxy-port={proxy_port}", *extra]


def operator_env(container: dict, home: pathlib.Path, work: pathlib.Path, kubeconfig: pathlib.Path,
                 image_env: dict[str, str]) -> dict[str, str]:
    """The process environment: this machine's, less any Ansible/Python/Kubernetes setting of
    this checkout, plus the image's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV", "PIP_", "K8S_AUTH", "KUBECONFIG"))}
    tmp = work / "tmp"
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"].replace("/tmp/", str(tmp) + "/")
    env.update(image_env)
    cfg = work / "ansible.cfg"
    cfg.write_text(IMAGE_ANSIBLE_CFG)
    env.update(HOME=str(home), KUBECONFIG=str(kubeconfig), ANSIBLE_CONFIG=str(cfg),
               ANSIBLE_COLLECTIONS_PATH=str(home / ".ansible" / "collections"),
               PATH=os.pathsep.join([str(IMAGE_VENV / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]))
    return env


def layout_home(home: pathlib.Path) -> dict[str, str]:
    """HOME as the image holds it (hack/image.py); returns the Dockerfile's ENV."""
    env_file = home.with_name(home.name + ".env")
    if not (IMAGE_VENV / "bin" / "python").exists():
        raise FileNotFoundError(f"{IMAGE_VENV} is missing: run 'make .venv-image/.setup-stamp' "
                                "(make test and make test-image build it)")
    proc = subprocess.run([sys.executable, "-m", "hack.image", "--venv", str(IMAGE_VENV), "--home", str(home),
                           "--env-file", str(env_file)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"hack.image failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
    out = {}
    for line in env_file.read_text().splitlines():
        key, _, value = line.partition("=")
        out[key] = value.strip("'")
    return out


def _kubectl(kubeconfig: pathlib.Path, *args: str, stdin: str | None = None) -> str:
    res = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                         capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), res.stderr.strip()))
    return res.stdout


def identity_objects() -> list[dict]:
    """config/default's Namespace, ServiceAccount and RBAC objects (as `make deploy` renders them)."""
    rendered = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "config" / "default")], check=True,
                              capture_output=True, text=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in IDENTITY_KINDS]


def operator_identity(admin_kubeconfig: pathlib.Path, out: pathlib.Path, duration: str = "24h") -> pathlib.Path:
    """Apply the operator's identity (config/rbac) with the admin, mint a token of its
    ServiceAccount (TokenRequest) and write a kubeconfig holding only that token to `out`."""
    _kubectl(admin_kubeconfig, "apply", "--server-side", "--field-manager=torchdev-test", "-f", "-",
             stdin=yaml.safe_dump_all(identity_objects()))
    token = _kubectl(admin_kubeconfig, "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE,
                     "--duration", duration).strip()
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    ctx_name = admin.get("current-context") or admin["contexts"][0]["name"]
    ctx = next(c["context"] for c in admin["contexts"] if c["name"] == ctx_name)
    cluster = dict(next(c["cluster"] for c in admin["clusters"] if c["name"] == ctx["cluster"]))
    if "certificate-authority" in cluster:  # a path: embed it, the file may be relative
        path = pathlib.Path(cluster.pop("certificate-authority"))
        path = path if path.is_absolute() else admin_kubeconfig.parent / path
        cluster["certificate-authority-data"] = base64.b64encode(path.read_bytes()).decode()
    out.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "cluster", "user": SERVICE_ACCOUNT}}]}))
    out.chmod(0o600)
    return out


def reap_orphans() -> list[int]:
    """Stop the ansible-operators of this checkout left running by a process that died holding
    PROXY_LOCK (killed without its teardown): the lock is ours now, so no live owner has one, and
    an orphan would keep port 8888. Only those of this network namespace: another's (hack/isolate.py)
    has a port 8888 and a PROXY_LOCK of its own. Returns their pids."""
    pids = []
    here = os.readlink("/proc/self/ns/net")
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            exe = os.readlink(proc / "exe")
            net = os.readlink(proc / "ns" / "net")
        except OSError:
            continue
        if exe == str(BIN) and net == here:
            pids.append(int(proc.name))
            try:
                os.kill(int(proc.name), 9)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while any(pathlib.Path("/proc/%d/exe" % p).exists() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


class AnsibleOperator(Managed):
    """The real ansible-operator as a child process (a context manager): `start()` lays out the
    image's HOME, the operator's identity, starts the binary and waits for /readyz."""
    keep_env = "TORCHDEV_KEEP_OPERATOR_WORKDIR"

    def __init__(self, admin_kubeconfig: str | os.PathLike, workdir: str | os.PathLike | None = None,
                 extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None, watches: str | None = None):
        """`watches`: another watches.yaml (its text) for HOME instead of ours (tests: a subset of the
        watches, other watch vars)."""
        self.admin_kubeconfig = pathlib.Path(admin_kubeconfig)
        self._own_workdir = workdir is None
        self.work = pathlib.Path(workdir or tempfile.mkdtemp(prefix="torchdev-ansible-operator-"))
        self.extra_args, self.extra_env = tuple(extra_args), dict(env or {})
        self.watches = watches
        self.home = self.work / "home"
        self.kubeconfig = self.work / "operator.kubeconfig"
        self.log_path = self.work / "ansible-operator.log"
        self.child = Child("ansible-operator", self.log_path)
        self.health_port = self.metrics_port = 0
        self.proxy_port = PROXY_PORT
        self.timings: dict[str, float] = {}
        self._lock = None

    def _acquire_proxy_port(self, timeout: float) -> None:
        """Wait (up to `timeout`) until no other operator of this machine holds the proxy port."""
        self._lock = open(PROXY_LOCK, "a")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self._lock.close()
                    self._lock = None
                    raise TimeoutError("another ansible-operator holds port %d (%s) for over %ss"
                                       % (PROXY_PORT, PROXY_LOCK, timeout)) from None
                time.sleep(0.5)

    def start(self, timeout: float = 180, lock_timeout: float = 1800) -> AnsibleOperator:
        if not BIN.is_file():
            raise FileNotFoundError("%s is not built: run `make operator-build`" % BIN)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "tmp" / "ansible" / "tmp").mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        image_env = layout_home(self.home)
        if self.watches is not None:
            (self.home / "watches.yaml").write_text(self.watches)
        t1 = time.monotonic()
        operator_identity(self.admin_kubeconfig, self.kubeconfig)
        t2 = time.monotonic()
        container = manager_container()
        self.health_port, self.metrics_port = free_port(), free_port()
        self._acquire_proxy_port(lock_timeout)
        reap_orphans()
        t3 = time.monotonic()  # the wait for another operator is not start time
        env = operator_env(container, self.home, self.work, self.kubeconfig, image_env)
        env.update(self.extra_env)
        self.child.spawn(operator_args(container, self.health_port, self.metrics_port, self.proxy_port,
                                       self.extra_args), self.home, env)
        self.child.wait_until(lambda: Child.http_ok("http://127.0.0.1:%d/readyz" % self.health_port), timeout,
                              "/readyz")
        self.timings = {"home_s": t1 - t0, "identity_s": t2 - t1, "lock_wait_s": t3 - t2,
                        "ready_s": time.monotonic() - t3}
        return self

    def stop(self, timeout: float = 30) -> None:
        self.child.stop(timeout)
        if self._lock:
            self._lock.close()  # releases the flock
            self._lock = None
        self._remove_workdir()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Run the real ansible-operator as the image does, with the "
                                     "operator's own ServiceAccount token (config/rbac), in the foreground.")
    parser.add_argument("--kubeconfig", required=True, type=pathlib.Path, help="an admin kubeconfig of the cluster")
    parser.add_argument("--workdir", type=pathlib.Path, default=ROOT / ".cache" / "ansible-operator",
                        help="HOME, the operator's kubeconfig and the log go here (default: %(default)s)")
    parser.add_argument("extra", nargs="*", help="more ansible-operator flags (after --)")
    args = parser.parse_args(argv)
    op = AnsibleOperator(args.kubeconfig, args.workdir, tuple(args.extra))
    op.start()
    return op.serve("ansible-operator ready (pid %d, health 127.0.0.1:%d, metrics 127.0.0.1:%d); log: %s; "
                    "ready in %.1fs after HOME %.1fs and identity %.1fs" % (
                        op.proc.pid, op.health_port, op.metrics_port, op.log_path, op.timings["ready_s"],
                        op.timings["home_s"], op.timings["identity_s"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
