"""config/prometheus scrapes both metrics ports of torchdev's operator pod (issue 13.1/13.5), on
both install paths: `make deploy` (config/default, namespace torchdev-system, with
config/prometheus) and OLM (the Deployment of the bundle's ClusterServiceVersion, built from
config/manifests by hack/bundle.py, installed into `operators`, with config/prometheus-olm).

Followed as Prometheus Operator and Kubernetes follow them: the ServiceMonitor selects the
Service by its labels in its own namespace, each endpoint names a Service port, the Service
selects pods by labels and sends to a named container port, and the container listens there
on the pod's address (not loopback).  The exporter's port serves the torchdev_* series, the
manager's ansible-operator's controller_runtime_* series (the TorchdevReconcileErrors alert);
the local runtime serves the same names (tests/observability/test_runtime_metrics.py).
"""
from __future__ import annotations

import copy

import pytest

from hack import bundle, render_manifests

OLM_NAMESPACE = "operators"  # vanilla OLM's global OperatorGroup (tests/delivery/test_olm_install.py)
ANOTHER_OPERATOR = {"control-plane": "controller-manager", "app.kubernetes.io/name": "some-other-operator"}


def _one(objects, kind):
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


@pytest.fixture(scope="module")
def paths():
    """{path: (operator namespace, pod template, config/prometheus objects as rendered)}."""
    deployment = _one(render_manifests.kustomize("default"), "Deployment")
    parts = bundle.partition(render_manifests.kustomize("manifests"))
    csv, _ = bundle.build_csv(parts["csv"][0], parts, "0.0.0")
    (olm,) = csv["spec"]["install"]["spec"]["deployments"]
    return {"kustomize": (deployment["metadata"]["namespace"], deployment["spec"]["template"],
                          render_manifests.kustomize("prometheus")),
            "olm": (OLM_NAMESPACE, olm["spec"]["template"], render_manifests.kustomize("prometheus-olm"))}


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _listens_on(container: dict, port: int) -> str | None:
    """Why ``container`` does not serve /metrics on the pod's address at ``port`` (None: it does)."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if container["name"] == "exporter":  # python3 -m torchdev_exporter --port P [--address A]
        got = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8686
        host = argv[argv.index("--address") + 1] if "--address" in argv else "0.0.0.0"
    else:  # ansible-operator --metrics-bind-address=HOST:PORT (default :8443)
        bind = next((a.split("=", 1)[1] for a in argv if a.startswith("--metrics-bind-address=")), ":8443")
        host, _, got = bind.rpartition(":")
        got = int(got)
    if got != port:
        return f"{container['name']} serves metrics on {got}, its port says {port}"
    if host.startswith("127.") or host in ("localhost", "::1"):
        return f"{container['name']} binds its metrics to {host} (loopback): no scrape reaches it"
    return None


def scrape_problems(namespace: str, template: dict, objects: list[dict]) -> tuple[list[str], set[str]]:
    """(what keeps the ServiceMonitor from scraping the operator pod, the containers it scrapes)."""
    problems, scraped = [], set()
    service, monitor = _one(objects, "Service"), _one(objects, "ServiceMonitor")
    for obj in (service, monitor, _one(objects, "PrometheusRule")):
        if obj["metadata"].get("namespace") != namespace:
            problems.append(f"{obj['kind']} is in {obj['metadata'].get('namespace')}, the operator in {namespace}")
    if not _selects(monitor["spec"]["selector"].get("matchLabels") or {}, service["metadata"].get("labels") or {}):
        problems.append("the ServiceMonitor does not select the Service")
    pod_labels = template["metadata"].get("labels") or {}
    if not _selects(service["spec"]["selector"], pod_labels):
        problems.append("the Service does not select the operator pod")
    if _selects(service["spec"]["selector"], ANOTHER_OPERATOR):
        problems.append("the Service also selects another operator's controller-manager pod")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    containers = template["spec"]["containers"]
    for endpoint in monitor["spec"]["endpoints"]:
        port = ports.get(endpoint["port"])
        if port is None:
            problems.append(f"endpoint {endpoint['port']}: no such Service port")
            continue
        target = [(c, p) for c in containers for p in c.get("ports") or [] if p.get("name") == port["targetPort"]]
        if not target:
            problems.append(f"Service port {port['name']}: no container port named {port['targetPort']}")
            continue
        (container, container_port), = target
        why = _listens_on(container, container_port["containerPort"]) or _authorized(container, endpoint)
        if why:
            problems.append(why)
        else:
            scraped.add(container["name"])
    problems += _policy_problems(namespace, template, objects, {p["targetPort"] for p in ports.values()})
    return problems, scraped


def _authorized(container: dict, endpoint: dict) -> str | None:
    """Why the exporter would refuse the endpoint's scrapes, or serve them to anyone (issue
    25.7: HTTPS and a bearer token reviewed by the cluster, unless --insecure-loopback)."""
    if container["name"] != "exporter":
        return None
    if "--insecure-loopback" in list(container.get("command") or []) + list(container.get("args") or []):
        return "the exporter serves plain HTTP without authentication (--insecure-loopback)"
    if endpoint.get("scheme") != "https" or not (endpoint.get("bearerTokenFile") or endpoint.get("authorization")):
        return "the exporter's endpoint scrapes without HTTPS and a bearer token: the exporter refuses it"
    return None


def _policy_problems(namespace: str, template: dict, objects: list[dict], metrics_ports: set) -> list[str]:
    """The NetworkPolicy admits to the operator pod only its metrics ports, only from namespaces
    labelled metrics=enabled (a namespaceSelector, no ipBlock), and denies every other ingress."""
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    if len(policies) != 1:
        return ["%d NetworkPolicies for the operator pod, want 1" % len(policies)]
    spec = policies[0]["spec"]
    problems = []
    if policies[0]["metadata"].get("namespace") != namespace:
        problems.append("the NetworkPolicy is in %s, the operator in %s" % (policies[0]["metadata"].get("namespace"),
                                                                           namespace))
    if not _selects(spec["podSelector"].get("matchLabels") or {}, template["metadata"].get("labels") or {}) \
            or _selects(spec["podSelector"].get("matchLabels") or {}, ANOTHER_OPERATOR):
        problems.append("the NetworkPolicy does not select the operator pod alone")
    if spec.get("policyTypes") != ["Ingress"]:
        problems.append("the NetworkPolicy's policyTypes are %s, not [Ingress]" % spec.get("policyTypes"))
    for rule in spec.get("ingress") or []:
        ports = {p.get("port") for p in rule.get("ports") or []}
        if not ports or not ports <= metrics_ports:
            problems.append("the NetworkPolicy admits ports %s, beyond the metrics ports" % (sorted(map(str, ports))
                                                                                             or "all"))
        sources = rule.get("from") or []
        if not sources or any(set(src) != {"namespaceSelector"} or not src["namespaceSelector"].get("matchLabels")
                              for src in sources):
            problems.append("the NetworkPolicy admits sources other than labelled namespaces: %s" % sources)
    return problems


@pytest.mark.parametrize("path", ["kustomize", "olm"])
def test_the_service_monitor_scrapes_the_exporter_and_the_manager(paths, path):
    namespace, template, objects = paths[path]
    problems, scraped = scrape_problems(namespace, template, objects)
    assert problems == []
    assert scraped == {"exporter", "manager"}


def _container(template, name):
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


def _manager(template):
    return _container(template, "manager")


def _bind_loopback(template):
    args = _manager(template)["args"]
    args[:] = ["--metrics-bind-address=127.0.0.1:8080" if a.startswith("--metrics-bind-address") else a
               for a in args]


@pytest.mark.parametrize("name,mutate,problem", [
    ("the manager's metrics on loopback (as before)", lambda t, o: _bind_loopback(t), "(loopback)"),
    ("no container port for the manager's metrics", lambda t, o: _manager(t).pop("ports"),
     "no container port named manager-metrics"),
    ("the Service selects by control-plane alone",
     lambda t, o: _one(o, "Service")["spec"]["selector"].pop("app.kubernetes.io/name"), "another operator"),
    ("the objects in another namespace than the operator",
     lambda t, o: [obj["metadata"].update(namespace="torchdev-system") for obj in o], "is in torchdev-system"),
    ("the exporter's endpoint over plain HTTP (as before)",
     lambda t, o: [_one(o, "ServiceMonitor")["spec"]["endpoints"][0].pop(k) for k in ("scheme", "bearerTokenFile")],
     "without HTTPS and a bearer token"),
    ("the exporter without authentication",
     lambda t, o: _container(t, "exporter")["command"].append("--insecure-loopback"), "--insecure-loopback"),
    ("no NetworkPolicy (as before)", lambda t, o: o.remove(_one(o, "NetworkPolicy")), "0 NetworkPolicies"),
    ("a NetworkPolicy admitting every port",
     lambda t, o: _one(o, "NetworkPolicy")["spec"]["ingress"][0].pop("ports"), "beyond the metrics ports"),
    ("a NetworkPolicy admitting every namespace",
     lambda t, o: _one(o, "NetworkPolicy")["spec"]["ingress"][0].pop("from"), "other than labelled namespaces"),
    ("a ServiceMonitor selecting other labels",
     lambda t, o: _one(o, "ServiceMonitor")["spec"]["selector"]["matchLabels"].update(team="x"),
     "does not select the Service"),
])
def test_the_check_finds_each_break(paths, name, mutate, problem):
    namespace, template, objects = copy.deepcopy(paths["olm"])
    mutate(template, objects)
    problems, _ = scrape_problems(namespace, template, objects)
    assert any(problem in p for p in problems), (name, problems)
