"""The bundle installed the way OLM installs it (issue 16.6), on kubesim: OLM's
ClusterServiceVersion CRD and the CSV itself, the bundle's CRDs and other manifests, then what
OLM's install strategy creates from the CSV: the service account, a ClusterRole and
ClusterRoleBinding per clusterPermissions entry, a Role and RoleBinding per permissions entry,
the Deployment. The Deployment only exists (kubesim schedules and "runs" its pod); the local
runtime (torchdev_runtime, as in tests/_cluster.py) stands in for the image's ansible-operator
and reconciles the alm-examples' DevServerFlavor and DevServer to Ready.

That the operator's requests are all granted by these permissions follows from two tests: the
rule `permissions` (tests/delivery/test_bundle.py: the CSV's clusterPermissions ARE config/rbac's
ClusterRole) and tests/security/test_rbac_requests.py (every request the operator makes is
granted by that ClusterRole); kubesim does not authorize requests itself.
"""
from __future__ import annotations

import json

import pytest
import yaml

from _e2e_helpers import GROUP, NODES, ROOT, VERSION, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OPERATORS = "operators"  # the namespace of OLM's global OperatorGroup (AllNamespaces)
USER_NAMESPACE = "dev-jane"


def olm_labels(csv: dict) -> dict:
    """The labels OLM puts on what it creates for a CSV."""
    return {"olm.owner": csv["metadata"]["name"], "olm.owner.kind": "ClusterServiceVersion",
            "olm.owner.namespace": OPERATORS}


def strategy_objects(csv: dict) -> list[dict]:
    """What OLM's deployment install strategy creates from the CSV, in the operator's namespace."""
    name, labels = csv["metadata"]["name"], olm_labels(csv)
    spec = csv["spec"]["install"]["spec"]
    accounts = sorted({p["serviceAccountName"] for key in ("clusterPermissions", "permissions")
                       for p in spec.get(key, [])})
    objects = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": a, "labels": labels}}
               for a in accounts]
    for kind, key in (("ClusterRole", "clusterPermissions"), ("Role", "permissions")):
        for entry in spec.get(key, []):
            role = "%s-%s" % (name, entry["serviceAccountName"])
            objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                            "metadata": {"name": role, "labels": labels}, "rules": entry["rules"]})
            objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind + "Binding",
                            "metadata": {"name": role, "labels": labels},
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                            "subjects": [{"kind": "ServiceAccount", "name": entry["serviceAccountName"],
                                          "namespace": OPERATORS}]})
    for deployment in spec["deployments"]:
        objects.append({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": deployment["name"], "labels": dict(deployment.get("label") or {},
                                                                                 **labels)},
                        "spec": deployment["spec"]})
    return objects


@pytest.fixture(scope="module")
def cluster(generated):
    """kubesim with the bundle installed as OLM would: {sim, api objects, csv, created objects}."""
    from kubernetes import client, config, utils

    from hack import bundle_validate
    from kubesim.testing import KubeSim

    root, _ = generated
    manifests = [yaml.safe_load(p.read_text()) for p in sorted((root / "bundle" / "manifests").glob("*.yaml"))]
    (csv,) = [m for m in manifests if m["kind"] == "ClusterServiceVersion"]
    with KubeSim(nodes=NODES) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        ext, core, custom = client.ApiextensionsV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
        # OLM's own API, then the bundle as the catalog unpacks it
        ext.create_custom_resource_definition(bundle_validate.csv_crd())
        for crd in (m for m in manifests if m["kind"] == "CustomResourceDefinition"):
            ext.create_custom_resource_definition(crd)
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATORS}})
        # the CSV lives in the namespace it is installed into (the bundle's says "placeholder")
        csv = dict(csv, metadata=dict(csv["metadata"], namespace=OPERATORS))
        created_csv = custom.create_namespaced_custom_object("operators.coreos.com", "v1alpha1", OPERATORS,
                                                             "clusterserviceversions", csv)
        created = []
        for obj in strategy_objects(csv) + [m for m in manifests if m["kind"] not in (
                "ClusterServiceVersion", "CustomResourceDefinition")]:
            utils.create_from_dict(api, obj, namespace=OPERATORS)
            created.append(obj)
        kube = {"core": core, "apps": client.AppsV1Api(api), "rbac": client.RbacAuthorizationV1Api(api),
                "custom": custom}
        yield {"sim": sim, "kube": kube, "csv": created_csv, "created": created}


@pytest.fixture(scope="module")
def operator(cluster):
    from torchdev_runtime.runtime import Runtime

    with Runtime(str(ROOT / "watches.yaml"), cluster["sim"].kubeconfig, ansible_config=str(ROOT / "ansible.cfg"),
                 max_concurrent_reconciles=2) as rt:
        yield rt


def test_the_csv_is_admitted_by_olms_crd(cluster):
    csv = cluster["csv"]
    assert csv["metadata"]["namespace"] == OPERATORS and csv["metadata"]["uid"]
    assert csv["spec"]["install"]["strategy"] == "deployment"


def test_the_install_strategy_objects_exist(cluster):
    kube, csv = cluster["kube"], cluster["csv"]
    spec = csv["spec"]["install"]["spec"]
    (account,) = {p["serviceAccountName"] for p in spec["clusterPermissions"] + spec["permissions"]}
    assert kube["core"].read_namespaced_service_account(account, OPERATORS)
    role = kube["rbac"].read_cluster_role("%s-%s" % (csv["metadata"]["name"], account))
    assert [r.to_dict() for r in role.rules] and len(role.rules) == len(spec["clusterPermissions"][0]["rules"])
    binding = kube["rbac"].read_cluster_role_binding(role.metadata.name)
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", account, OPERATORS)]
    assert kube["rbac"].read_namespaced_role_binding(role.metadata.name, OPERATORS).role_ref.kind == "Role"
    # the users' ClusterRole the operator binds by name (resourceNames in its ClusterRole)
    assert kube["rbac"].read_cluster_role("torchdev-devserver-user")
    (entry,) = spec["deployments"]
    deployment = kube["apps"].read_namespaced_deployment(entry["name"], OPERATORS)
    assert deployment.spec.template.spec.service_account_name == account
    assert deployment.metadata.labels["olm.owner"] == csv["metadata"]["name"]


def test_the_alm_examples_reconcile_to_ready(cluster, operator):
    sim, kube, csv = cluster["sim"], cluster["kube"], cluster["csv"]
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    server = next(e for e in examples if e["kind"] == "DevServer" and e["metadata"]["name"] == "jane-dev")
    flavor = next(e for e in examples if e["kind"] == "DevServerFlavor"
                  and e["metadata"]["name"] == server["spec"]["flavor"])
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor)
    kube["core"].create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": USER_NAMESPACE}})
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, USER_NAMESPACE, "devservers", server)
    obj = wait_ready(sim, kube, USER_NAMESPACE, "jane-dev", timeout=120)
    assert obj["status"]["phase"] == "Running" and obj["status"]["ready"] == "1/1"
    pod = kube["core"].read_namespaced_pod("jane-dev-0", USER_NAMESPACE)
    assert pod.spec.node_name.startswith("g5-")  # the example flavor's A10G nodes

    def flavor_counted():
        status = kube["custom"].get_cluster_custom_object(GROUP, VERSION, "devserverflavors",
                                                          flavor["metadata"]["name"]).get("status") or {}
        return status if status.get("devServers") == 1 else None
    sim.wait_for(flavor_counted, 60, message="the flavor's status to count the server")
