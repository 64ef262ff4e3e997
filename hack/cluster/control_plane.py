"""The real control plane of the test tier (issue 26): etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok (the fake kubelet) on loopback.

`ControlPlane(directory).up()` generates the certificates and keys under `directory/pki`,
picks free ports, starts the processes (logs in `directory/logs`, pids in
`directory/state.json`), registers the fake nodes (hack/sample-nodes.spec, the nodes the
kubesim tier runs on, through kubesim.nodes), waits for /readyz, the default ServiceAccount
and Ready nodes, and writes `directory/kubeconfig` (admin, system:masters). `down()` stops
exactly the processes `up()` recorded (a pid is only signalled while its command line still
names `directory`), also when some already died, and may be called again.

The binaries come from `make cluster-build` (hack/cluster/go.mod, into .cache/cluster/bin).
Every directory is its own cluster: tests start one per session in a temporary directory.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import yaml

from hack.child import Child
from hack.cluster.pki import CA, service_account_keys
from kubesim.nodes import parse_nodes

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN_DIR = ROOT / ".cache" / "cluster" / "bin"
DEFAULT_DIR = ROOT / ".cache" / "cluster" / "run"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
            "kwok-stages.yaml")
NODES_SPEC = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
SERVICE_CIDR = "10.0.0.0/24"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# kubesim's kubelet annotations (kubesim.io/succeed-after, fail-after, exit-code, ...) as kwok stages
KUBESIM_STAGES = pathlib.Path(__file__).with_name("kwok-kubesim-stages.yaml")
# The admission plugins the issue names, with the rest of kube-apiserver's defaults and
# NodeRestriction (as kind/kubeadm enable it).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "PodSecurity", "ResourceQuota",
    "DefaultStorageClass", "DefaultTolerationSeconds", "NodeRestriction",
    "StorageObjectInUseProtection", "PersistentVolumeClaimResize", "Priority", "RuntimeClass",
    "TaintNodesByCondition", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "DefaultIngressClass", "ClusterTrustBundleAttest",
    "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
)

# The audit policy of `ControlPlane(audit=True)`: every request once it is answered, without the
# control plane's own chatter (leases, the nodes' and the scheduler's and controller manager's
# certificate identities); deletions with the object deleted (who deleted which volume: the
# tests' data-safety check).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None", "users": ["system:kube-scheduler", "system:kube-controller-manager"]},
        {"level": "None", "userGroups": ["system:nodes"]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*"]},
        {"level": "RequestResponse", "verbs": ["delete", "deletecollection"]},
        {"level": "Metadata"},
    ],
}


class ClusterError(RuntimeError):
    """The control plane could not be started (the message names the log to read)."""


def missing_binaries(bin_dir: pathlib.Path = BIN_DIR) -> list[str]:
    return [b for b in BINARIES if not os.access(bin_dir / b, os.R_OK if b.endswith(".yaml") else os.X_OK)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kubeconfig(server: str, ca: pathlib.Path, user: str, creds: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": user,
            "clusters": [{"name": "torchdev-real",
                          "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": user, "context": {"cluster": "torchdev-real", "user": user}}]}


class ControlPlane:
    def __init__(self, directory: pathlib.Path | str = DEFAULT_DIR,
                 bin_dir: pathlib.Path | str = BIN_DIR, nodes_spec: str = NODES_SPEC, audit: bool = False):
        """`audit`: kube-apiserver writes an audit log (AUDIT_POLICY, JSON lines) to `audit_log`:
        the tests of the real tier read the requests of the operator and of the test from it."""
        self.dir = pathlib.Path(directory).resolve()
        self.audit = audit
        self.bin = pathlib.Path(bin_dir).resolve()
        self.nodes_spec = nodes_spec
        self.pki = self.dir / "pki"
        self.logs = self.dir / "logs"
        self.state_path = self.dir / "state.json"
        self.kubeconfig = self.dir / "kubeconfig"
        self.audit_log = self.logs / "audit.log"
        self._procs: dict[int, subprocess.Popen] = {}  # reaped in down()

    # -- state -----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {"processes": {}}

    def _save(self, state: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(state, indent=1))

    @property
    def server(self) -> str:
        return self.state()["server"]

    def _ours(self, pid: int) -> bool:
        """pid is alive and still one of this directory's processes (not a reused pid)."""
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return str(self.dir).encode() in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z"

    def running(self) -> dict[str, bool]:
        # A process this object started is alive until it exits (poll): its /proc cmdline is
        # empty for a moment while it execs, which _ours would take for another process.
        return {name: self._procs[pid].poll() is None if pid in self._procs else self._ours(pid)
                for name, pid in self.state()["processes"].items()}

    # -- start -----------------------------------------------------------------------
    def _start(self, state: dict, name: str, args: list[str]) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([str(self.bin / name), *args], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        state["processes"][name] = proc.pid
        self._procs[proc.pid] = proc
        self._save(state)
        return proc

    def _certs(self) -> dict[str, pathlib.Path]:
        ca = CA(self.pki)
        front = CA(self.pki, "front-proxy-ca")
        files: dict[str, pathlib.Path] = {"ca": ca.crt_path, "ca-key": ca.key_path,
                                          "front-proxy-ca": front.crt_path}
        files["serving"], files["serving-key"] = ca.issue(
            self.pki, "apiserver", "kube-apiserver",
            server_names=("localhost", "kubernetes", "kubernetes.default",
                          "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
            ips=("127.0.0.1", "10.0.0.1"))
        files["front-proxy"], files["front-proxy-key"] = front.issue(
            self.pki, "front-proxy-client", "front-proxy-client")
        files["sa-key"], files["sa-pub"] = service_account_keys(self.pki)
        for name, cn, orgs in (("admin", "torchdev-admin", ("system:masters",)),
                               ("controller-manager", "system:kube-controller-manager", ()),
                               ("scheduler", "system:kube-scheduler", ())):
            files[name], files[f"{name}-key"] = ca.issue(self.pki, name, cn, orgs)
        return files

    def _write_kubeconfig(self, path: pathlib.Path, server: str, crt: pathlib.Path,
                          key: pathlib.Path, user: str) -> pathlib.Path:
        cfg = _kubeconfig(server, self.pki / "ca.crt", user,
                          {"client-certificate": str(crt), "client-key": str(key)})
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    def up(self, timeout: float = 300) -> pathlib.Path:
        """Start everything; returns the admin kubeconfig's path. Idempotent while running."""
        if missing := missing_binaries(self.bin):
            raise ClusterError(f"missing {', '.join(missing)} in {self.bin}: run `make cluster-build`")
        if self.kubeconfig.exists() and self.state()["processes"] and all(self.running().values()):
            return self.kubeconfig
        self.down()
        self.dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        f = self._certs()
        ports = {n: free_port() for n in ("etcd", "etcd-peer", "apiserver", "controller-manager",
                                          "scheduler", "kwok")}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        state: dict[str, Any] = {"server": server, "ports": ports, "processes": {}}
        self._save(state)
        kc = {name: self._write_kubeconfig(self.dir / f"{name}.kubeconfig", server, f[name],
                                           f[f"{name}-key"], name)
              for name in ("admin", "controller-manager", "scheduler")}
        deadline = started + timeout

        self._start(state, "etcd", [f"--data-dir={self.dir / 'etcd'}",
                                    f"--listen-client-url=http://127.0.0.1:{ports['etcd']}",
                                    f"--listen-peer-url=http://127.0.0.1:{ports['etcd-peer']}"])
        # kube-apiserver gives up on etcd after 20 s; a loaded machine can take that long to
        # start etcd (its binary read cold), so it starts once etcd answers.
        self._wait(lambda: Child.http_ok(f"http://127.0.0.1:{ports['etcd']}/health"), deadline,
                   "etcd /health", "etcd")
        self._start(state, "kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['apiserver']}",
            "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={f['serving']}", f"--tls-private-key-file={f['serving-key']}",
            f"--client-ca-file={f['ca']}",
            "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={f['sa-pub']}",
            f"--service-account-signing-key-file={f['sa-key']}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            # the aggregation layer (Kueue's visibility API is an APIService)
            f"--requestheader-client-ca-file={f['front-proxy-ca']}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={f['front-proxy']}",
            f"--proxy-client-key-file={f['front-proxy-key']}",
            "--enable-aggregator-routing=true", "--profiling=false",
            *self._audit_args(),
        ])
        self._wait(lambda: self._get("/readyz") == 200, deadline, "kube-apiserver /readyz",
                   "kube-apiserver")
        self._start(state, "kube-controller-manager", [
            f"--kubeconfig={kc['controller-manager']}",
            f"--authentication-kubeconfig={kc['controller-manager']}",
            f"--authorization-kubeconfig={kc['controller-manager']}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['controller-manager']}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--controllers=*,bootstrapsigner,tokencleaner",
            f"--service-account-private-key-file={f['sa-key']}", f"--root-ca-file={f['ca']}",
            f"--cluster-signing-cert-file={f['ca']}", f"--cluster-signing-key-file={f['ca-key']}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cert-dir={self.dir / 'controller-manager-certs'}",
        ])
        self._start(state, "kube-scheduler", [
            f"--kubeconfig={kc['scheduler']}",
            f"--authentication-kubeconfig={kc['scheduler']}",
            f"--authorization-kubeconfig={kc['scheduler']}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['scheduler']}",
            "--leader-elect=false", f"--cert-dir={self.dir / 'scheduler-certs'}",
        ])
        self._register_nodes()
        kwok_config = self.dir / "kwok.yaml"
        kwok_config.write_text(yaml.safe_dump({
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            "options": {"cidr": "10.244.0.1/16", "nodeIP": "10.0.0.1",
                        "manageAllNodes": False,
                        "manageNodesWithAnnotationSelector": "=".join(KWOK_ANNOTATION),
                        "nodeLeaseDurationSeconds": 40,
                        # kwok's documented defaults, which it does not apply to a config file
                        "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4,
                        "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 1,
                        "enablePodsOnNodeSyncListPager": True, "enableProfilingHandler": False,
                        "serverAddress": f"127.0.0.1:{ports['kwok']}"}})
                               + (self.bin / "kwok-stages.yaml").read_text()
                               + KUBESIM_STAGES.read_text())
        self._start(state, "kwok", [f"--kubeconfig={kc['admin']}", f"--config={kwok_config}"])
        self._wait(lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") == 200,
                   deadline, "the default ServiceAccount", "kube-controller-manager")
        self._wait(self._nodes_ready, deadline, "Ready nodes without the not-ready taint", "kwok")
        state["startSeconds"] = round(time.monotonic() - started, 1)
        self._save(state)
        shutil.copyfile(kc["admin"], self.kubeconfig)  # last: a kubeconfig means a usable cluster
        self.kubeconfig.chmod(0o600)
        return self.kubeconfig

    def _audit_args(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0"]

    # -- API helpers (stdlib: usable before any client library is configured) -------
    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        """One request as the admin: (status code, decoded JSON or text); 0 when unreachable."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, context=self._ssl(), timeout=10) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw.startswith(b"{") else raw.decode())
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, (json.loads(raw) if raw.startswith(b"{") else raw.decode())
        except (OSError, ssl.SSLError) as e:
            return 0, str(e)

    def _get(self, path: str) -> int:
        return self.request("GET", path)[0]

    def _wait(self, ok, deadline: float, what: str, log: str) -> None:
        while True:
            if ok():
                return
            for name, alive in self.running().items():
                if not alive:
                    log_file = self.logs / (name + ".log")
                    tail = log_file.read_text(errors="replace").strip().splitlines()[-3:] \
                        if log_file.exists() else []
                    raise ClusterError(f"{name} exited while waiting for {what}: "
                                       f"see {log_file}" + "".join("\n  " + t for t in tail))
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}: see {self.logs / (log + '.log')}")
            time.sleep(0.2)

    def _register_nodes(self) -> None:
        for node in parse_nodes(self.nodes_spec):
            meta = node["metadata"]
            meta["annotations"][KWOK_ANNOTATION[0]] = KWOK_ANNOTATION[1]
            meta["labels"]["type"] = "kwok"
            node["spec"]["providerID"] = f"kwok://{meta['name']}"
            code, body = self.request("POST", "/api/v1/nodes", node)
            if code not in (201, 409):
                raise ClusterError(f"registering node {meta['name']}: {code} {body}")

    def _nodes_ready(self) -> bool:
        code, body = self.request("GET", "/api/v1/nodes")
        if code != 200 or not body.get("items"):
            return False
        for node in body["items"]:
            ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            taints = [t["key"] for t in node.get("spec", {}).get("taints") or []]
            if not ready or ready[0]["status"] != "True" or "node.kubernetes.io/not-ready" in taints:
                return False
        return True

    # -- credentials ---------------------------------------------------------------------
    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> pathlib.Path:
        """A kubeconfig for `user` (a client certificate CN=user, O=groups): only what RBAC
        grants that user (and system:authenticated) applies."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
        users = self.dir / "users"
        users.mkdir(exist_ok=True)
        crt, key = CA(self.pki).issue(users, safe, user, tuple(groups))
        return self._write_kubeconfig(users / f"{safe}.kubeconfig", self.server, crt, key, safe)

    def wait_quota_counts(self, resource: str, timeout: float = 150) -> None:
        """Wait until kube-controller-manager's quota controller counts `resource` (e.g.
        count/devservers.torchdev.io): it finds a CRD's resources by discovery every 30 s, and
        until then a quota on it refuses every such object ("status unknown for quota"). In a
        cluster the CRDs are installed long before anyone is onboarded; a fresh control plane
        waits for it. A probe quota in `default`, created again until its first status counts
        the resource (a quota is computed when created)."""
        path = "/api/v1/namespaces/default/resourcequotas"
        deadline = time.monotonic() + timeout
        while True:
            self.request("DELETE", f"{path}/probe")
            code, body = self.request("POST", path, {"apiVersion": "v1", "kind": "ResourceQuota",
                                                     "metadata": {"name": "probe"},
                                                     "spec": {"hard": {resource: "1"}}})
            if code != 201:
                raise ClusterError(f"probe quota: {code} {body}")
            status = None
            while status is None and time.monotonic() < deadline:
                status = self.request("GET", f"{path}/probe")[1].get("status")
                time.sleep(0.5)
            if resource in (status or {}).get("used", {}):
                self.request("DELETE", f"{path}/probe")
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"the quota controller did not count {resource} in {timeout}s")

    def service_account_token(self, namespace: str, name: str, seconds: int = 86400) -> str:
        """A bound token of ServiceAccount namespace/name (TokenRequest)."""
        code, body = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds}})
        if code != 201:
            raise ClusterError(f"TokenRequest for {namespace}/{name}: {code} {body}")
        return body["status"]["token"]

    def service_account_kubeconfig(self, namespace: str, name: str,
                                   seconds: int = 86400) -> pathlib.Path:
        """A kubeconfig with a bound token of ServiceAccount namespace/name (TokenRequest)."""
        token = self.service_account_token(namespace, name, seconds)
        users = self.dir / "users"
        users.mkdir(exist_ok=True)
        path = users / f"sa-{namespace}-{name}.kubeconfig"
        cfg = _kubeconfig(self.server, self.pki / "ca.crt", f"{namespace}-{name}",
                          {"token": token})
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    # -- stop ----------------------------------------------------------------------------
    def down(self, timeout: float = 20) -> list[str]:
        """Stop the recorded processes (newest first); returns the names signalled."""
        state = self.state()
        stopped = []
        for name, pid in reversed(list(state.get("processes", {}).items())):
            if not self._ours(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            stopped.append(name)
            deadline = time.monotonic() + timeout
            while self._ours(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._ours(pid):
                os.kill(pid, signal.SIGKILL)
        for proc in self._procs.values():
            proc.poll()
        self._procs.clear()
        if state.get("processes"):
            state["processes"] = {}
            self._save(state)
        self.kubeconfig.unlink(missing_ok=True)
        return stopped

