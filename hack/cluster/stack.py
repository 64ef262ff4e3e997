"""The real control plane made ready for torchdev: what the real test tier (tests/_real_tier.py)
and `make demo CLUSTER=real` (hack/demo.py) both start.

`Stack(work, nodes_spec, kueue=...).up()` starts hack/cluster's ControlPlane (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok with the given node pools), then:

* kubesim's storage classes (gp3, efs-sc: kubesim/cluster.py seeds them), so a claim binds on
  both tiers, and `Provisioner`: the control plane has no volume provisioner, so this thread binds
  each claim of those classes' provisioners to a new hostPath volume, as an external provisioner
  does (it answers the PV controller's `volume.kubernetes.io/storage-provisioner` annotation), and
  deletes a released volume whose reclaim policy is Delete;
* torchdev's CRDs (`kubectl kustomize config/crd`, server-side apply), Established, and the
  sample DevServerFlavors; the quota controller counting DevServers (a DevUser's quota does);
* with `kueue=True`, the real Kueue (hack/kueue).

`down()` stops them in reverse order. The operator is not part of it: the tier and the demo start
hack/ansible_operator's AnsibleOperator with their own watches.
"""
from __future__ import annotations

import pathlib
import subprocess
import threading
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
GROUP, VERSION = "torchdev.io", "v1alpha1"


def storage_classes() -> list[dict]:
    from kubesim.cluster import SEED_OBJECTS

    return [o for o in SEED_OBJECTS if o["kind"] == "StorageClass"]


STORAGE_CLASSES = storage_classes()
PROVISIONERS = {c["provisioner"] for c in STORAGE_CLASSES}


class Provisioner(threading.Thread):
    """A static-volume provisioner for kubesim's storage classes (see the module's docstring)."""

    def __init__(self, kubeconfig: str, root: pathlib.Path):
        super().__init__(name="real-tier-provisioner", daemon=True)
        from kubernetes import client, config

        self.core = client.CoreV1Api(config.new_client_from_config(kubeconfig))
        self.root = root
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        from kubernetes.client import ApiException

        while not self.stopping.wait(0.3):
            try:
                self._once()
            except ApiException as err:  # the cluster may be going down
                self.errors.append(str(err)[:300])
            except Exception as err:  # noqa: BLE001 - urllib3 errors while stopping
                self.errors.append(repr(err)[:300])

    def _once(self) -> None:
        from kubernetes.client import ApiException

        classes = {c["metadata"]["name"]: c for c in STORAGE_CLASSES}
        for pvc in self.core.list_persistent_volume_claim_for_all_namespaces().items:
            ann = pvc.metadata.annotations or {}
            prov = ann.get("volume.kubernetes.io/storage-provisioner") or ann.get(
                "volume.beta.kubernetes.io/storage-provisioner")
            if pvc.status.phase != "Pending" or prov not in PROVISIONERS or pvc.spec.volume_name:
                continue
            sc = classes.get(pvc.spec.storage_class_name or "")
            name = "pvc-" + pvc.metadata.uid
            try:
                self.core.create_persistent_volume({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": prov}},
                    "spec": {"capacity": {"storage": pvc.spec.resources.requests["storage"]},
                             "accessModes": pvc.spec.access_modes, "storageClassName": pvc.spec.storage_class_name,
                             "persistentVolumeReclaimPolicy": (sc or {}).get("reclaimPolicy", "Delete"),
                             "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                          "namespace": pvc.metadata.namespace, "name": pvc.metadata.name,
                                          "uid": pvc.metadata.uid},
                             "hostPath": {"path": str(self.root / name)}}})
            except ApiException as err:
                if err.status != 409:
                    raise
        for pv in self.core.list_persistent_volume().items:
            if (pv.status.phase == "Released" and pv.spec.persistent_volume_reclaim_policy == "Delete"
                    and (pv.metadata.annotations or {}).get("pv.kubernetes.io/provisioned-by") in PROVISIONERS):
                try:
                    self.core.delete_persistent_volume(pv.metadata.name)
                except ApiException as err:
                    if err.status != 404:
                        raise

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    return subprocess.run([str(KUBECTL), "--kubeconfig", kubeconfig, *args], input=stdin, check=True,
                          capture_output=True, text=True, timeout=180).stdout


class Stack:
    """The control plane, storage, torchdev's CRDs and sample flavors, and optionally Kueue."""

    def __init__(self, work: pathlib.Path, nodes_spec: str, kueue: bool = False, audit: bool = False):
        self.work = pathlib.Path(work)
        self.nodes_spec, self.with_kueue, self.audit = nodes_spec, kueue, audit
        self.parts: dict[str, Any] = {}

    @property
    def cluster(self):
        return self.parts["cluster"]

    @property
    def kubeconfig(self) -> str:
        return str(self.parts["cluster"].kubeconfig)

    @property
    def kueue(self):
        return self.parts.get("kueue")

    def up(self) -> Stack:
        from kubernetes import client, config
        from kubernetes.client import ApiException

        from hack.cluster.control_plane import ClusterError, ControlPlane

        cp = ControlPlane(self.work / "cluster", nodes_spec=self.nodes_spec, audit=self.audit)
        self.parts["cluster"] = cp
        try:
            cp.up()
        except ClusterError as err:  # a component that died while starting on a loaded machine
            print(f"the control plane did not start, starting it once more: {err}")
            cp.up()
        kubeconfig = self.kubeconfig
        api = config.new_client_from_config(kubeconfig)
        storage = client.StorageV1Api(api)
        for sc in STORAGE_CLASSES:
            try:
                storage.create_storage_class(sc)
            except ApiException as err:
                if err.status != 409:
                    raise
        self.parts["provisioner"] = Provisioner(kubeconfig, self.work / "volumes")
        self.parts["provisioner"].start()
        crds = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "config" / "crd")], check=True,
                              capture_output=True, text=True, timeout=180).stdout
        _kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=crds)
        _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all")
        cp.wait_quota_counts(f"count/devservers.{GROUP}")  # a DevUser's quota counts DevServers
        custom = client.CustomObjectsApi(api)
        for f in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
            try:
                custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", yaml.safe_load(f.read_text()))
            except ApiException as err:
                if err.status != 409:
                    raise
        if self.with_kueue:
            from hack.kueue.run import Kueue

            self.parts["kueue"] = Kueue(cp.kubeconfig, self.work / "kueue").start()
        return self

    def down(self) -> None:
        parts, self.parts = self.parts, {}
        for name in ("kueue", "provisioner"):
            if name in parts:
                try:
                    parts[name].stop()
                except Exception:  # noqa: BLE001 - stop the rest
                    pass
        if "cluster" in parts:
            parts["cluster"].down()

    def __enter__(self) -> Stack:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc) -> None:
        self.down()
