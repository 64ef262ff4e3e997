"""The bundle installed the way OLM installs it (issue 16.6), on kubesim: OLM's
ClusterServiceVersion CRD and the CSV itself, the bundle's CRDs and other manifests, then what
OLM's install strategy creates from the CSV: the service account, a ClusterRole and
ClusterRoleBinding per clusterPermissions entry, a Role and RoleBinding per permissions entry,
the Deployment. The Deployment only exists (kubesim schedules and "runs" its pod); the local
runtime (torchdev_runtime, as in tests/_cluster.py) stands in for the image's ansible-operator
and reconciles every alm-example to its working state.

That the operator's requests are all granted by these permissions follows from two tests: the
rule `permissions` (tests/delivery/test_bundle.py: the CSV's clusterPermissions ARE config/rbac's
ClusterRole) and tests/security/test_rbac_requests.py (every request the operator makes is
granted by that ClusterRole); kubesim does not authorize requests itself.
"""
from __future__ import annotations

import json

import pytest
import yaml

from _e2e_helpers import GROUP, KEY, ROOT, VERSION, condition, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OPERATORS = "operators"  # the namespace of OLM's global OperatorGroup (AllNamespaces)
# the sample node pools with room for every example at once (the distributed one takes 4 A10G nodes)
NODES = (ROOT / "hack" / "sample-nodes.spec").read_text().strip().replace("g5:2x{", "g5:6x{")


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


def _prerequisites(kube, namespace: str, examples: list[dict]) -> None:
    """What the examples name and a user creates beforehand: the Secrets and the shared claim."""
    from kubernetes.client.exceptions import ApiException

    def create(fn, body):
        try:
            fn(namespace, body)
        except ApiException as exc:  # the same Secret named by two examples
            if exc.status != 409:
                raise
    for ex in examples:
        spec = ex["spec"]
        secrets = [(spec.get("sshKeySecretRef") or {}).get("name"),
                   ((spec.get("checkpoint") or {}).get("storage") or {}).get("secretName")]
        secrets += [e["valueFrom"]["secretKeyRef"]["name"] for e in spec.get("env") or []
                    if (e.get("valueFrom") or {}).get("secretKeyRef")]
        for name in filter(None, secrets):
            data = {"authorized_keys": KEY, "api-key": "k", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
            create(kube["core"].create_namespaced_secret,
                   {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data})
        if spec.get("sharedVolumeClaimName"):
            create(kube["core"].create_namespaced_persistent_volume_claim,
                   {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": spec["sharedVolumeClaimName"]},
                    "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs-sc",
                             "resources": {"requests": {"storage": "100Gi"}}}})


def test_the_alm_examples_reconcile_to_ready(cluster, operator):
    """Every alm-example reaches its working state: the flavors are Valid, the users'
    namespaces are Active, every DevServer is Ready on the nodes its flavor selects, every
    TrainingJob runs all its workers."""
    sim, kube, csv = cluster["sim"], cluster["kube"], cluster["csv"]
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    kinds = [e["kind"] for e in examples]
    assert {"DevServerFlavor", "DevUser", "DevServer", "TrainingJob"} <= set(kinds), kinds
    custom = kube["custom"]
    for ex in examples:  # cluster-scoped first: the flavors and the users (who get dev-<name>)
        if ex["kind"] == "DevUser" and int((ex["spec"].get("quota") or {}).get("gpus", 0)) > 0:
            # the GPU user's namespace holds the samples' GPU servers and the 8-GPU job at once,
            # more than the sample's 8 GPUs: its ResourceQuota (enforced on kubesim as by
            # kube-apiserver) would refuse the job's workers
            ex["spec"]["quota"]["gpus"] = 32
        if ex["kind"] in ("DevServerFlavor", "DevUser"):
            custom.create_cluster_custom_object(GROUP, VERSION, ex["kind"].lower() + "s", ex)
    users = [e["metadata"]["name"] for e in examples if e["kind"] == "DevUser"]
    for user in users:
        obj = sim.wait_for(lambda: (lambda o: o if condition(o, "Ready").get("status") == "True" else None)(
            custom.get_cluster_custom_object(GROUP, VERSION, "devusers", user)), 120,
            message="DevUser %s Ready" % user)
        assert obj["status"]["phase"] == "Active"
    # the servers in the first user's namespace, the training jobs in the GPU user's (its quota)
    gpu_user = next(e["metadata"]["name"] for e in examples if e["kind"] == "DevUser"
                    and int((e["spec"].get("quota") or {}).get("gpus", 0)) > 0)
    server_ns, job_ns = "dev-" + users[0], "dev-" + gpu_user  # (quota admission refuses GPU pods elsewhere)
    servers = [e for e in examples if e["kind"] == "DevServer"]
    jobs = [e for e in examples if e["kind"] == "TrainingJob"]
    _prerequisites(kube, server_ns, servers)
    _prerequisites(kube, job_ns, jobs)
    # a server in a DevUser's namespace is owned by that user (any other owner is OwnerMismatch,
    # docs/api.md): the samples name several owners, the namespace has one
    server_owner = next(e for e in examples if e["kind"] == "DevUser"
                        and e["metadata"]["name"] == users[0])["spec"]["email"]
    for ex in servers:
        ex["spec"]["owner"] = server_owner
        custom.create_namespaced_custom_object(GROUP, VERSION, server_ns, "devservers", ex)
    for ex in jobs:
        custom.create_namespaced_custom_object(GROUP, VERSION, job_ns, "trainingjobs", ex)
    flavors = {e["metadata"]["name"]: e for e in examples if e["kind"] == "DevServerFlavor"}
    for ex in servers:
        obj = wait_ready(sim, kube, server_ns, ex["metadata"]["name"], timeout=180)
        assert obj["status"]["phase"] == "Running", obj["status"]
        pool = flavors[ex["spec"]["flavor"]]["spec"].get("nodeSelector") or {}
        for i in range(int(obj["status"]["ready"].split("/")[1])):
            pod = kube["core"].read_namespaced_pod("%s-%d" % (ex["metadata"]["name"], i), server_ns)
            node = kube["core"].read_node(pod.spec.node_name)
            assert pool.items() <= (node.metadata.labels or {}).items(), (pod.spec.node_name, pool)
    for ex in jobs:
        name = ex["metadata"]["name"]
        sim.wait_for(lambda: (custom.get_namespaced_custom_object(GROUP, VERSION, job_ns, "trainingjobs", name)
                              .get("status") or {}).get("state") == "Running", 180,
                     message="TrainingJob %s Running" % name)
    for name in flavors:
        obj = custom.get_cluster_custom_object(GROUP, VERSION, "devserverflavors", name)
        assert condition(obj, "Ready").get("reason") == "Valid", (name, obj.get("status"))
