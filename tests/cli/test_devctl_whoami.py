"""devctl whoami against kubesim.

kubesim does not serve authentication.k8s.io SelfSubjectReview (whoami falls back to the kube
context's user). For the SelfSubjectReview path and for users who may not list DevUsers, a small
HTTP proxy in front of kubesim answers SelfSubjectReviews with a given userInfo and 403s the
requests a non-admin could not make; everything else reaches kubesim.
"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

from devctl_helpers import as_json, invoke, unique

SSR_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
DEVUSERS_PATH = "/apis/torchdev.io/v1alpha1/devusers"


def _devuser(users, name, *, kueue=True, **spec):
    users.create(name, f"{name}@example.com", **spec)
    users.ready(name, kueue=kueue)
    return name


def _whoami(sim, *args, kubeconfig=None):
    return invoke(["--kubeconfig", kubeconfig or sim.kubeconfig, "whoami", *args])


def test_whoami_finds_my_devuser_by_owner_email(sim, users):
    name = _devuser(users, unique("alice"), quota={"gpus": 8})
    assert invoke(["config", "set-owner", f"{name}@example.com"]).exit_code == 0
    me = as_json(_whoami(sim, "-o", "json"))
    assert me["source"] == "kubeconfig" and me["username"] == "kubesim-admin"
    assert me["context"] == "kubesim"
    assert me["devUser"] == name and me["foundBy"] == "email"
    assert me["email"] == f"{name}@example.com"
    assert me["namespace"] == f"dev-{name}"
    assert me["queue"] == "torchdev" and me["clusterQueue"] == f"torchdev-{name}" and me["kueue"] is True
    assert me["quota"]["gpus"] == 8 and me["quota"]["storage"] == "2Ti"
    assert me["phase"] == "Active"


def test_whoami_finds_my_devuser_by_namespace(sim, users):
    name = _devuser(users, unique("bob"), kueue=False)
    me = as_json(_whoami(sim, "-n", f"dev-{name}", "-o", "json"))
    assert me["devUser"] == name and me["foundBy"] == "namespace"
    assert me["queue"] is None and me["kueue"] is False


def test_whoami_table(sim, users):
    name = _devuser(users, unique("carol"), quota={"gpus": 4, "flavors": [{"name": "gpu-h100-8", "gpus": 16}]})
    result = invoke(["--kubeconfig", sim.kubeconfig, "whoami", "-n", f"dev-{name}"])
    assert result.exit_code == 0, result.stderr
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert fields["User"] == "kubesim-admin (kubeconfig context user)"
    assert fields["DevUser"] == name and fields["Namespace"] == f"dev-{name}"
    assert fields["Queue"] == f"torchdev (ClusterQueue torchdev-{name})"
    assert fields["Quota"].startswith("4 GPUs, 64 CPU, 256Gi memory per flavor; gpu-h100-8: 16 GPUs")


def test_whoami_without_devuser_warns_and_exits_0(sim, users):
    result = invoke(["--kubeconfig", sim.kubeconfig, "-n", "dev-nobody-at-all", "whoami", "-o", "json"])
    me = as_json(result)
    assert me["devUser"] is None and me["namespace"] == "dev-nobody-at-all"
    assert "no DevUser found" in result.stderr and "devctl admin onboard" in result.stderr


# -- through a proxy: SelfSubjectReview, and a user who may not list DevUsers ---------------------

class _Proxy:
    def __init__(self, upstream: str, user_info: dict, forbidden: set[tuple[str, str]]):
        proxy = self
        self.reviews: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body: bytes, ctype="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = self.path.split("?")[0]
                if self.command == "POST" and path == SSR_PATH:
                    review = json.loads(body)
                    proxy.reviews.append(review)
                    review["status"] = {"userInfo": user_info}
                    return self._send(201, json.dumps(review).encode())
                if (self.command, path) in forbidden:
                    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                              "reason": "Forbidden", "message": f'cannot {self.command} "{path}"'}
                    return self._send(403, json.dumps(status).encode())
                req = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                             headers={k: v for k, v in self.headers.items()
                                                      if k.lower() not in ("host", "content-length")})
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        code, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type")
                except urllib.error.HTTPError as exc:
                    code, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
                self._send(code, data, ctype or "application/json")

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def kubeconfig(self, sim, path) -> str:
        with open(sim.kubeconfig) as fh:
            cfg = yaml.safe_load(fh)
        cfg["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{self.server.server_port}"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_whoami_uses_self_subject_review_and_finds_devuser_by_its_email(sim, users, tmp_path):
    name = _devuser(users, unique("dave"))
    user_info = {"username": f"{name}@example.com", "groups": ["system:authenticated", "ml-team"]}
    with _Proxy(sim.url, user_info, set()) as proxy:
        me = as_json(_whoami(sim, "-o", "json", kubeconfig=proxy.kubeconfig(sim, tmp_path / "kc")))
    assert proxy.reviews and proxy.reviews[0]["kind"] == "SelfSubjectReview"
    assert me["source"] == "SelfSubjectReview"
    assert me["username"] == f"{name}@example.com"
    assert me["groups"] == ["system:authenticated", "ml-team"]
    assert me["devUser"] == name and me["foundBy"] == "email"


def test_whoami_when_devusers_may_not_be_listed(sim, users, tmp_path):
    """A plain user: no list on the cluster-scoped DevUsers; devctl reads its own by name."""
    name = _devuser(users, unique("erin"))
    user_info = {"username": f"{name}@example.com", "groups": ["system:authenticated"]}
    with _Proxy(sim.url, user_info, {("GET", DEVUSERS_PATH)}) as proxy:
        me = as_json(_whoami(sim, "-o", "json", kubeconfig=proxy.kubeconfig(sim, tmp_path / "kc")))
    assert me["devUser"] == name and me["namespace"] == f"dev-{name}"
