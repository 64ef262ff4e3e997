#!/usr/bin/env python3
"""The real Kueue controller (issue 26.2) against a cluster, outside it, with its webhooks and
its visibility API reachable from the API server.

    python -m hack.kueue.run --kubeconfig ADMIN_KUBECONFIG [--workdir DIR]

* The binary: .cache/cluster/bin/kueue, `make kueue-build` (`go install sigs.k8s.io/kueue/cmd/
  kueue@v0.19.2`: no replace directives, so no go.mod of ours). VERSION below; the module's own
  CRDs (config/components/crd/bases in GOMODCACHE) are installed; third_party/kueue-v0.19.2,
  which kubesim serves, holds the same bytes of the nine it vendors (tests/real/test_kueue_real.py).
* Its configuration (config.kueue.x-k8s.io/v1beta2): the release's controller_manager_config
  with what torchdev needs (docs/api.md "Kueue"): manageJobsWithoutQueueName false, the
  integrations batch/job (TrainingJob), pod (EphemeralAccelerationJob; statefulset needs it)
  and statefulset (DevServer); leader election off; health and metrics on free loopback ports.
* Webhooks: served on 127.0.0.1:<free port> with a certificate of our own CA (hack/cluster/pki.py;
  Kueue's internal cert management is off: it would issue one for the in-cluster Service name).
  The release's webhook manifests (config/components/webhook/manifests.yaml, with its
  kustomization's namespaceSelector: not kube-system, kueue-system) are registered as
  kueue-mutating-/kueue-validating-webhook-configuration with `clientConfig.url:
  https://127.0.0.1:<port><path>` and our CA as caBundle.
* The visibility API (v1beta2 and v1beta1 APIServices, as the release registers them): an
  APIService can only name a Service, and kube-apiserver (--enable-aggregator-routing=true)
  proxies to that Service's EndpointSlice, whose addresses may not be loopback (API
  validation). So Kueue's visibility server listens on this machine's first non-loopback IPv4
  address (`host_ip()`), a selector-less Service kueue-system/kueue-visibility-server has an
  EndpointSlice naming that address and port, and the APIServices carry our CA (whose
  certificate names the Service's DNS name, which the aggregator verifies) instead of the
  release's insecureSkipTLSVerify. Without such an address the
  visibility API is left out (VisibilityOnDemand off), said in `Kueue.visibility`.
* Kueue reads its metrics and visibility certificates from fixed paths (/etc/kueue/metrics/certs,
  /visibility: its Deployment mounts them). It runs in a private mount namespace (`unshare -m`,
  root) where this run's certificate directories are bound onto those paths; the two empty
  mount points are created once on the machine.
"""
from __future__ import annotations

import argparse
import base64
import copy
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import yaml

from hack.child import Child, Managed
from hack.cluster.control_plane import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = "v0.19.2"
BIN = ROOT / ".cache" / "cluster" / "bin" / "kueue"
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
NAMESPACE = "kueue-system"
PREFIX = "kueue-"  # the release's kustomize namePrefix
# What torchdev's roles need queued (docs/api.md "Kueue"): TrainingJob's Job, the EphemeralAccelerationJob's
# pod, the DevServer's StatefulSet (Kueue's statefulset integration requires pod).
FRAMEWORKS = ("batch/job", "pod", "statefulset")
# The fixed certificate paths of Kueue's main.go and pkg/visibility (internal cert management off).
FIXED_CERT_DIRS = {"metrics": "/etc/kueue/metrics/certs", "visibility": "/visibility"}


def module_dir() -> pathlib.Path:
    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
    path = pathlib.Path(gomodcache) / ("sigs.k8s.io/kueue@" + VERSION)
    if not (path / "config" / "components").is_dir():
        raise FileNotFoundError("%s is not downloaded: run `make kueue-build`" % path)
    return path



def host_ip() -> str | None:
    """This machine's first non-loopback IPv4 address (where the route to the outside starts), or None;
    TORCHDEV_HOST_IP names it instead (hack/isolate.py: a network namespace's own address)."""
    if os.environ.get("TORCHDEV_HOST_IP"):
        return os.environ["TORCHDEV_HOST_IP"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # TEST-NET-2; no packet is sent: only the route is looked up
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def crds() -> list[dict]:
    """The CRDs of the Kueue module (what its release installs)."""
    return [yaml.safe_load(p.read_text())
            for p in sorted((module_dir() / "config" / "components" / "crd" / "bases").glob("*.yaml"))]


def configuration(health_port: int, metrics_port: int, webhook_port: int, cert_dir: pathlib.Path,
                  visibility: tuple[str, int] | None) -> dict:
    """The controller's Configuration: the release's, with this run's addresses and torchdev's integrations."""
    cfg = yaml.safe_load((module_dir() / "config" / "components" / "manager" / "controller_manager_config.yaml").read_text())
    cfg.update({
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": "127.0.0.1:%d" % health_port},
        "metrics": {"bindAddress": "127.0.0.1:%d" % metrics_port},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
    })
    if visibility:
        cfg["visibilityServer"] = {"bindAddress": visibility[0], "bindPort": visibility[1]}
    else:
        cfg["featureGates"] = {"VisibilityOnDemand": False}
    return cfg


def webhook_configurations(port: int, ca_pem: bytes) -> list[dict]:
    """The release's webhook configurations, pointed at https://127.0.0.1:<port><path>."""
    webhook = module_dir() / "config" / "components" / "webhook"
    docs = [d for d in yaml.safe_load_all((webhook / "manifests.yaml").read_text()) if d]
    kustomization = yaml.safe_load((webhook / "kustomization.yaml").read_text())
    patch = yaml.safe_load(kustomization["patches"][0]["patch"])
    selector = patch["webhooks"][0]["namespaceSelector"]
    selected = {path.split("[name=", 1)[1].split("]", 1)[0]
                for repl in kustomization["replacements"] for target in repl["targets"]
                for path in target["fieldPaths"]} | {patch["webhooks"][0]["name"]}
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": "https://127.0.0.1:%d%s" % (port, path),
                                    "caBundle": base64.b64encode(ca_pem).decode()}
            if hook["name"] in selected:
                hook["namespaceSelector"] = copy.deepcopy(selector)
        out.append(doc)
    return out


def visibility_objects(ip: str, port: int, ca_pem: bytes) -> list[dict]:
    """The visibility APIServices of the release, through a Service whose EndpointSlice names ip:port."""
    name = PREFIX + "visibility-server"
    objs: list[dict] = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": name}},
         "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
         "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]},
    ]
    for version in ("v1beta1", "v1beta2"):
        api = yaml.safe_load((module_dir() / "config" / "components" / "visibility" /
                              ("apiservice_%s.yaml" % version)).read_text())
        api["spec"].pop("insecureSkipTLSVerify", None)
        api["spec"]["caBundle"] = base64.b64encode(ca_pem).decode()
        api["spec"]["service"] = {"name": name, "namespace": NAMESPACE, "port": 443}
        objs.append(api)
    return objs


def _kubectl(kubeconfig: pathlib.Path, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    res = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                         capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), res.stderr.strip()))
    return res.stdout


def apply(kubeconfig: pathlib.Path, objs: list[dict]) -> None:
    _kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "--field-manager=torchdev-test-kueue",
             "-f", "-", stdin=yaml.safe_dump_all(objs))


class Kueue(Managed):
    """The Kueue controller as a child process (a context manager)."""
    keep_env = "TORCHDEV_KEEP_KUEUE_WORKDIR"

    def __init__(self, admin_kubeconfig: str | os.PathLike, workdir: str | os.PathLike | None = None,
                 visibility: bool = True):
        self.admin_kubeconfig = pathlib.Path(admin_kubeconfig).resolve()
        self._own_workdir = workdir is None
        self.work = pathlib.Path(workdir or tempfile.mkdtemp(prefix="torchdev-kueue-"))
        self.log_path = self.work / "kueue.log"
        self.want_visibility = visibility
        self.visibility: str = ""  # where the visibility API is served, or why not
        self.child = Child("kueue", self.log_path)
        self.timings: dict[str, float] = {}

    def _certs(self) -> tuple[pathlib.Path, bytes]:
        from hack.cluster.pki import CA

        ca = CA(self.work / "pki")
        certs = self.work / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        ips = ("127.0.0.1",) + ((self.ip,) if self.ip else ())
        # the aggregator checks the Service's DNS name (not the EndpointSlice's address)
        ca.issue(certs, "tls", "kueue", server_names=("localhost", "%svisibility-server.%s.svc" % (PREFIX, NAMESPACE)),
                 ips=ips)
        return certs, ca.crt_path.read_bytes()

    def start(self, timeout: float = 180) -> Kueue:
        if not BIN.is_file():
            raise FileNotFoundError("%s is not built: run `make kueue-build`" % BIN)
        if os.geteuid() != 0:
            raise PermissionError("Kueue runs in a private mount namespace (unshare -m): run as root")
        t0 = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        self.ip = host_ip() if self.want_visibility else None
        certs, ca_pem = self._certs()
        ports = {k: free_port() for k in ("health", "metrics", "webhook", "visibility")}
        self.health_port = ports["health"]
        vis = (self.ip, ports["visibility"]) if self.ip else None
        self.visibility = ("https://%s:%d (Service %s/%svisibility-server, its EndpointSlice)" % (
            self.ip, ports["visibility"], NAMESPACE, PREFIX) if vis else
            "off: no non-loopback IPv4 address for the EndpointSlice" if self.want_visibility else "off")
        config = self.work / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(ports["health"], ports["metrics"], ports["webhook"], certs, vis)))
        apply(self.admin_kubeconfig, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}] + crds())
        _kubectl(self.admin_kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
                 *["crd/" + c["metadata"]["name"] for c in crds()])
        for path in FIXED_CERT_DIRS.values():
            os.makedirs(path, exist_ok=True)  # the mount points (empty; the certificates are bound onto them)
        binds = " && ".join("mount --bind %s %s" % (certs, path) for path in FIXED_CERT_DIRS.values())
        script = '%s && exec "$@"' % binds
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.child.spawn(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "kueue", str(BIN),
                          "--config=%s" % config, "--kubeconfig=%s" % self.admin_kubeconfig, "--zap-log-level=2"],
                         self.work, env)
        t1 = time.monotonic()
        self.child.wait_until(lambda: Child.http_ok("http://127.0.0.1:%d/readyz" % self.health_port), timeout,
                              "/readyz")
        apply(self.admin_kubeconfig, webhook_configurations(ports["webhook"], ca_pem))
        if vis:
            apply(self.admin_kubeconfig, visibility_objects(self.ip, ports["visibility"], ca_pem))
            # Available is not enough (it does not check TLS): wait until the aggregator's proxy answers
            self.child.wait_until(self._visibility_answers, timeout, "visibility API through the aggregator")
        self.timings = {"setup_s": t1 - t0, "ready_s": time.monotonic() - t1}
        return self

    def _visibility_answers(self) -> bool:
        try:
            _kubectl(self.admin_kubeconfig, "get", "--raw", "/apis/visibility.kueue.x-k8s.io/v1beta2", timeout=20)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def unregister(self) -> None:
        """Remove what points the API server at this process (webhook configurations with
        failurePolicy Fail, the visibility APIServices): a stopped Kueue must not leave the
        cluster refusing pods and Jobs. Its CRDs and objects stay."""
        names = ["mutatingwebhookconfiguration/%smutating-webhook-configuration" % PREFIX,
                 "validatingwebhookconfiguration/%svalidating-webhook-configuration" % PREFIX,
                 "apiservice/v1beta1.visibility.kueue.x-k8s.io", "apiservice/v1beta2.visibility.kueue.x-k8s.io"]
        _kubectl(self.admin_kubeconfig, "delete", "--ignore-not-found", "--wait=false", *names)

    def stop(self, timeout: float = 30) -> None:
        if self.proc:
            try:
                self.unregister()
            except (RuntimeError, subprocess.TimeoutExpired):
                pass  # the cluster may be gone already
        self.child.stop(timeout)
        self._remove_workdir()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Run Kueue %s against a cluster, webhooks and visibility API "
                                     "reachable from its API server, in the foreground." % VERSION)
    parser.add_argument("--kubeconfig", required=True, type=pathlib.Path, help="an admin kubeconfig of the cluster")
    parser.add_argument("--workdir", type=pathlib.Path, default=ROOT / ".cache" / "kueue",
                        help="certificates, configuration and log (default: %(default)s)")
    parser.add_argument("--no-visibility", action="store_true", help="leave the visibility API out")
    args = parser.parse_args(argv)
    kueue = Kueue(args.kubeconfig, args.workdir, visibility=not args.no_visibility)
    kueue.start()
    return kueue.serve("kueue %s ready (pid %d) in %.1fs after %.1fs of setup; visibility: %s; log: %s" % (
        VERSION, kueue.proc.pid, kueue.timings["ready_s"], kueue.timings["setup_s"], kueue.visibility,
        kueue.log_path))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
