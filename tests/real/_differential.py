"""The runner of tests/real/test_differential_real.py: one case (a short sequence of HTTP
requests with stable bodies) is sent to kubesim and to the real kube-apiserver, and each
answer is reduced to a projection (the status code, a failure's reason and causes, and the
fields the case names) that must be the same on both.

A case runs in its own namespace (`$NS` in paths and bodies, created first on both servers);
`save` keeps a value of an answer for the later steps (`$name`). Paths in `reads` are dotted,
with `[N]` (an item), `[]` (every item) and `['a.b/c']` (a key with dots); a leading `?`
reads presence, `#` a length, and `path==$name` whether the value equals a saved one. `WATCH` steps read a watch for `timeoutSeconds` (1 s unless the
path names one) and project its events as (type, name) or, for an ERROR, (ERROR, code, reason);
`WAIT` steps poll a GET until it answers 200 and project nothing (the real server's
ServiceAccount controller creates a namespace's `default` ServiceAccount a moment later);
with `body={"optional": N}` they give up after N seconds without failing.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import time
from typing import Any

import urllib3
import yaml

JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


@dataclasses.dataclass(frozen=True)
class Step:
    method: str
    path: str
    body: Any = None
    ctype: str = JSON
    reads: tuple = ()
    save: tuple[tuple[str, str], ...] = ()  # (variable, path in the answer)


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    steps: tuple[Step, ...]
    source: str = ""  # where the case comes from (a kubesim test, an operator module)


class Endpoint:
    """Raw HTTP to one API server, authenticated as its kubeconfig's (admin) user."""

    def __init__(self, kubeconfig: str):
        cfg = yaml.safe_load(pathlib.Path(kubeconfig).read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.base = cluster["server"].rstrip("/")
        self.headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
        kw: dict[str, Any] = {"retries": False, "timeout": urllib3.Timeout(connect=5, read=20)}
        if self.base.startswith("https"):
            kw.update(cert_reqs="CERT_REQUIRED", ca_certs=cluster["certificate-authority"],
                      cert_file=user.get("client-certificate"), key_file=user.get("client-key"))
        self.pool = urllib3.PoolManager(**kw)

    def request(self, method: str, path: str, body: Any = None, ctype: str = JSON,
                preload: bool = True):
        headers = dict(self.headers, Accept="application/json")
        data = None
        if body is not None:
            data = body if isinstance(body, (str, bytes)) else json.dumps(body)
            headers["Content-Type"] = ctype
        return self.pool.request(method, self.base + path, body=data, headers=headers,
                                 preload_content=preload)

    def call(self, method: str, path: str, body: Any = None, ctype: str = JSON) -> tuple[int, Any]:
        resp = self.request(method, path, body, ctype)
        try:
            return resp.status, json.loads(resp.data) if resp.data else None
        except ValueError:
            return resp.status, resp.data.decode(errors="replace")

    def watch(self, path: str) -> tuple[int, list[dict]]:
        resp = self.request("GET", path, preload=False)
        if resp.status != 200:
            data = resp.read()
            return resp.status, [json.loads(data)] if data.startswith(b"{") else []
        events, buf = [], b""
        for chunk in resp.stream(4096):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    events.append(json.loads(line))
        if buf.strip():
            events.append(json.loads(buf))
        resp.release_conn()
        return 200, events


_TOKEN = re.compile(r"\[\]|\[-?\d+\]|\['[^']*'\]|[^.\[\]]+")


def dig(data: Any, path: str) -> Any:
    """The value at `path` (None when absent); `[]` maps the rest of the path over a list."""
    tokens = _TOKEN.findall(path)
    return _dig(data, tokens)


def _dig(data: Any, tokens: list[str]) -> Any:
    for i, tok in enumerate(tokens):
        if tok == "[]":
            return [_dig(x, tokens[i + 1:]) for x in data] if isinstance(data, list) else None
        if tok.startswith("['"):
            key = tok[2:-2]
        elif tok.startswith("["):
            idx = int(tok[1:-1])
            data = data[idx] if isinstance(data, list) and -len(data) <= idx < len(data) else None
            continue
        else:
            key = tok
        data = data.get(key) if isinstance(data, dict) else None
    return data


def read(data: Any, spec: Any) -> Any:
    if isinstance(spec, tuple):
        return spec[1](data)
    if spec.startswith("?"):
        return dig(data, spec[1:]) is not None
    if spec.startswith("#"):
        v = dig(data, spec[1:])
        return len(v) if isinstance(v, (list, dict, str)) else None
    return dig(data, spec)


def causes(data: Any) -> list[tuple]:
    """A Status's causes as sorted, distinct (reason, field) pairs (kube-apiserver names a field
    once per failed rule, e.g. a schema rule and a CEL rule both on spec.owner)."""
    found = (dig(data, "details.causes") or []) if isinstance(data, dict) else []
    return sorted({(c.get("reason"), c.get("field")) for c in found if isinstance(c, dict)})


def managers(data: Any) -> list[tuple]:
    """metadata.managedFields as sorted (manager, operation, subresource) triples."""
    return sorted((m.get("manager"), m.get("operation"), m.get("subresource") or "")
                  for m in dig(data, "metadata.managedFields") or [])


def _subst(value: Any, env: dict[str, str]) -> Any:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    for k in sorted(env, key=len, reverse=True):
        text = text.replace("$" + k, env[k])
    return text if isinstance(value, str) else json.loads(text)


def _event(e: dict) -> tuple:
    obj = e.get("object") or {}
    if e.get("type") == "ERROR":
        return ("ERROR", obj.get("code"), obj.get("reason"))
    return (e.get("type"), dig(obj, "metadata.name"))


def run_case(ep: Endpoint, case: Case, namespace: str, wait_timeout: float = 60) -> list[dict]:
    """The projections of the case's steps on one server (its namespace created first)."""
    code, body = ep.call("POST", "/api/v1/namespaces",
                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    assert code == 201, (ep.base, code, body)
    env = {"NS": namespace}
    out = []
    for n, step in enumerate(case.steps):
        path = _subst(step.path, env)
        if step.method == "WAIT":
            optional = (step.body or {}).get("optional")  # seconds; then no failure
            deadline = time.monotonic() + (optional or wait_timeout)
            while ep.call("GET", path)[0] != 200:
                if time.monotonic() >= deadline:
                    assert optional, f"{ep.base}: {path} never answered 200"
                    break
                time.sleep(0.1)
            continue
        if step.method == "WATCH":
            if "timeoutSeconds" not in path:
                path += ("&" if "?" in path else "?") + "timeoutSeconds=1"
            code, events = ep.watch(path)
            proj: dict[str, Any] = {"step": n, "code": code}
            if code == 200:
                proj["events"] = [_event(e) for e in events]
            else:
                proj.update(reason=dig(events[0], "reason") if events else None)
            out.append(proj)
            continue
        code, data = ep.call(step.method, path, _subst(step.body, env), step.ctype)
        proj = {"step": n, "code": code}
        if code >= 400:
            proj.update(reason=dig(data, "reason") if isinstance(data, dict) else data,
                        causes=causes(data))
        for spec in step.reads:
            if isinstance(spec, str) and "==$" in spec:  # equal to a saved value
                where, var = spec.split("==$")
                proj[spec] = dig(data, where) == env[var]
            else:
                proj[spec if isinstance(spec, str) else spec[0]] = read(data, spec)
        for var, where in step.save:
            value = dig(data, where)
            env[var] = value if isinstance(value, str) else json.dumps(value)
        out.append(proj)
    return out


def diff(a: list[dict], b: list[dict]) -> list[str]:
    """The steps and keys whose projections differ, as 'step N key: kubesim=... real=...'."""
    lines = []
    for pa, pb in zip(a, b):
        for k in sorted(set(pa) | set(pb)):
            if pa.get(k) != pb.get(k):
                lines.append(f"step {pa.get('step')} {k}: kubesim={pa.get(k)!r} real={pb.get(k)!r}")
    if len(a) != len(b):
        lines.append(f"{len(a)} steps on kubesim, {len(b)} on the real server")
    return lines
