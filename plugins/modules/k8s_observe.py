#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0
"""Ansible module: read several Kubernetes objects in one module run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k8s_observe
short_description: Read several Kubernetes objects (by name or label selector) in one module run
description:
  - Each C(kubernetes.core.k8s_info) task starts a Python process and imports the
    Kubernetes client, about a second per task. A reconcile that reads its custom
    resource's flavor and every child it may own pays that once with this module.
  - One GET per named object (a missing object is C(null), not an error), one LIST per
    label-selected or list query. Read-only, so check mode changes nothing.
  - With O(kueue), the same run also observes whether Kueue
    (C(kueue.x-k8s.io/v1beta2)) is served (discovery), a ResourceFlavor, a LocalQueue, the
    Workload of a StatefulSet with its pending position from the visibility on-demand API
    (C(visibility.kueue.x-k8s.io/v1beta2)), and the WorkloadPriorityClass that applies.
    Without Kueue only the discovery request is made.
version_added: "0.1.0"
author: torchdev maintainers
extends_documentation_fragment:
  - torchdev.operator.k8s_auth
options:
  namespace:
    description: Default namespace of the queries that do not set one.
    type: str
  queries:
    description:
      - Named queries. Each has C(api_version), C(plural) and either C(name),
        C(label_selector) or C(all=true) (every object); C(namespace) overrides the
        default; C(cluster=true) for cluster-scoped resources.
      - A query with C(discovery=true) and only C(api_version) asks whether that group
        version is served; its result is the list of its resource names (plurals, no
        subresources), or C(null) when the group version is not served.
      - A named query with C(optional=true) may have an empty C(name), for an object that has
        no name yet (the usage record of a DevServer that never started). Then no request is
        made and its result is C(null).
      - A list (C(label_selector) or C(all=true)) may also have a C(field_selector), e.g. the
        FailedCreate Events of one StatefulSet
        (C(involvedObject.kind=StatefulSet,involvedObject.name=x,reason=FailedCreate)).
      - A query with C(skip=true) makes no request either; its result is C(null) (for a list a
        role needs only now and then, such as the DevUser's UsageRecords).
    type: dict
    required: true
  devuser:
    description:
      - Also return (RV(devuser)) the DevUser that O(namespace) belongs to, the one its label
        O(devuser.label) names; C(null) when the namespace has no such label or that DevUser
        does not exist. Two GETs, shared with O(kueue.user_label).
    type: dict
    suboptions:
      label:
        description: The namespace label that names the DevUser.
        type: str
        required: true
      api_version:
        description: API version of the DevUser resource (plural C(devusers)).
        type: str
        default: torchdev.io/v1alpha1
  kueue:
    description:
      - Observe Kueue too (the result's RV(kueue)); every key is optional.
    type: dict
    suboptions:
      resource_flavor:
        description: Name of a ResourceFlavor to GET.
        type: str
      local_queue:
        description: Name of a LocalQueue to GET in O(namespace).
        type: str
      workload_owner:
        description:
          - Name of a named query whose object (a StatefulSet) Kueue queues. When it carries
            the C(kueue.x-k8s.io/queue-name) label, the Workload of O(namespace) that belongs
            to it is returned and, while that is not admitted, its entry in the LocalQueue's
            pending workloads (visibility API; any error there just means no entry).
        type: str
      priority_class:
        description:
          - The WorkloadPriorityClass the caller asks for. Whether it exists is checked
            when the owner does not exist yet and would be queued (the LocalQueue exists).
        type: str
      user_label:
        description:
          - When O(kueue.priority_class) is empty and the owner is (or would be) queued, the
            label of the namespace that names its DevUser, whose C(spec.queue.priorityClass)
            then applies.
        type: str
      user_api_version:
        description: API version of the DevUser resource (plural C(devusers)).
        type: str
        default: torchdev.io/v1alpha1
      eta:
        description:
          - While the owner's Workload waits for admission, also read what its queue ETA is
            computed from (RV(kueue.eta)), every ClusterQueue and every DevServer of the
            cluster (two LISTs; nothing while admitted).
        type: bool
        default: false
      cluster_queue:
        description:
          - While the owner is queued and scaled to 0 replicas, also GET the ClusterQueue of the
            LocalQueue (RV(kueue.cluster_queue)), which says whether it has room for the owner's
            pods (a DevServer that Kueue evicted waits so, its pods released). Nothing otherwise.
        type: bool
        default: false
"""

EXAMPLES = r"""
- name: Read a StatefulSet and, when Kueue is served, the LocalQueue and its Workload
  torchdev.operator.k8s_observe:
    namespace: dev-alice
    queries:
      statefulset: {api_version: apps/v1, plural: statefulsets, name: alice-dev}
    kueue:
      local_queue: torchdev
      workload_owner: statefulset
      user_label: torchdev.io/user
  register: observed

- name: Read a DevServer's flavor and StatefulSet, and its PVCs
  torchdev.operator.k8s_observe:
    namespace: dev-alice
    queries:
      flavor: {api_version: torchdev.io/v1alpha1, plural: devserverflavors, name: gpu-a10g-1, cluster: true}
      statefulset: {api_version: apps/v1, plural: statefulsets, name: alice-dev}
      pvcs: {api_version: v1, plural: persistentvolumeclaims, label_selector: torchdev.io/devserver=alice-dev}
  register: observed

- name: Is Kueue served, and which DevServerFlavors exist?
  torchdev.operator.k8s_observe:
    queries:
      kueue: {api_version: kueue.x-k8s.io/v1beta2, discovery: true}
      flavors: {api_version: torchdev.io/v1alpha1, plural: devserverflavors, all: true, cluster: true}
  register: observed
"""

RETURN = r"""
objects:
  description:
    - For each query name, the object (or C(null) when it does not exist) for a named
      query, the list of objects for a label-selected (or C(all)) one, and for a
      C(discovery) query the resource names of the group version (or C(null) when it
      is not served).
  returned: success
  type: dict
devuser:
  description: The DevUser O(namespace) belongs to, or C(null) (see O(devuser)).
  returned: when O(devuser) is given
  type: dict
kueue:
  description:
    - C(served) (bool), C(resource_flavor), C(local_queue), C(workload) (objects or
      C(null)), C(pending) (the Workload's PendingWorkload item from the visibility API,
      with the 0-based C(positionInClusterQueue), or C(null)) and C(priority_class)
      (C({name, source, exists}) or C(null); C(exists) is C(null) when not checked); with
      O(kueue.eta) while pending, C(eta) with the lists C(cluster_queues) and C(devservers), else C(null);
      with O(kueue.cluster_queue) while the owner is queued at 0 replicas, C(cluster_queue) (the
      ClusterQueue object of the LocalQueue, or C(null)), else C(null).
  returned: when O(kueue) is given
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_VERSION
from ansible_collections.torchdev.operator.plugins.module_utils.k8s import AUTH_ARG_SPEC, RequestError, api_client, request, run_module
from ansible_collections.torchdev.operator.plugins.module_utils.kueue import (API_VERSION as KUEUE_API_VERSION, VISIBILITY_API_VERSION, admitted,
                                                                        pending_entry, queue_name, workload_of)

try:
    from urllib.parse import urlencode
except ImportError:  # pragma: no cover - Python 2
    from urllib import urlencode


def query_path(query, default_namespace):
    """The REST path of a query: /api/v1/... or /apis/<group>/<version>/..."""
    api_version = query["api_version"]
    path = ("/apis/" if "/" in api_version else "/api/") + api_version
    if query.get("discovery"):
        return path
    if not query.get("cluster"):
        namespace = query.get("namespace") or default_namespace
        if not namespace:
            raise ValueError("query for %s needs a namespace (or cluster: true)" % query["plural"])
        path += "/namespaces/" + namespace
    path += "/" + query["plural"]
    if query.get("name"):
        path += "/" + query["name"]
    selectors = [(param, query[key]) for key, param in (("label_selector", "labelSelector"),
                                                         ("field_selector", "fieldSelector")) if query.get(key)]
    if selectors:
        path += "?" + urlencode(selectors)
    return path


def skipped(query):
    """A query with skip=true, or an optional named query whose name is empty: no request, null."""
    if boolean(query.get("skip", False), strict=False):
        return True
    return bool(query.get("optional")) and "name" in query and not query.get("name") and not query.get("label_selector")


def validate_query(name, query):
    if not isinstance(query, dict):
        return "query %s must be a dict" % name
    if query.get("discovery"):
        extra = sorted(k for k in ("plural", "name", "label_selector", "all") if query.get(k))
        if extra or not query.get("api_version"):
            return "query %s: a discovery query takes api_version only (got %s)" % (name, ", ".join(extra) or "none")
        return None
    for key in ("api_version", "plural"):
        if not query.get(key):
            return "query %s needs %s" % (name, key)
    if skipped(query):
        return None
    if sum(1 for k in ("name", "label_selector", "all") if query.get(k)) != 1:
        return "query %s needs exactly one of name and label_selector (or all: true)" % name
    if query.get("field_selector") and query.get("name"):
        return "query %s: field_selector is for a list (label_selector or all: true), not a name" % name
    return None


class Reader(object):
    """GETs through one client; a failure other than a tolerated 404 fails the module."""

    def __init__(self, module, client):
        self.module, self.client = module, client
        self._seen = {}  # path -> object: each path is read once per run

    def get(self, path, missing_ok=True):
        if path in self._seen:
            return self._seen[path]
        try:
            self._seen[path] = request(self.client, "GET", path, timeout=self.module.params["request_timeout"])
            return self._seen[path]
        except RequestError as exc:
            if exc.status == 404 and missing_ok:
                self._seen[path] = None
                return None
            self.module.fail_json(msg="failed to read %s: %s %s" % (path, exc.status, exc.reason),
                                  status=exc.status, reason=exc.reason, body=exc.body)

    def query(self, query, namespace):
        """The result of one (validated) query: see RETURN."""
        data = self.get(query_path(query, namespace),
                        missing_ok=bool(query.get("name") or query.get("discovery")))
        if query.get("discovery"):
            if data is None:
                return None
            resources = data.get("resources") or []
            return sorted(r["name"] for r in resources if "/" not in r.get("name", "/"))
        if query.get("name"):
            return data
        kind = (data.get("kind") or "").rsplit("List", 1)[0]
        items = data.get("items") or []
        for item in items:  # list items carry no kind/apiVersion
            item.setdefault("apiVersion", query["api_version"])
            item.setdefault("kind", kind)
        return items


def observe_kueue(reader, options, namespace, objects):
    """The RV(kueue) result: see DOCUMENTATION."""
    result = dict(served=False, resource_flavor=None, local_queue=None, workload=None, pending=None,
                  priority_class=None, eta=None, cluster_queue=None)
    if reader.query({"api_version": KUEUE_API_VERSION, "discovery": True}, namespace) is None:
        return result
    result["served"] = True

    def kueue_query(plural, **query):
        return reader.query(dict(query, api_version=KUEUE_API_VERSION, plural=plural), namespace)

    if options.get("resource_flavor"):
        result["resource_flavor"] = kueue_query("resourceflavors", name=options["resource_flavor"], cluster=True)
    if options.get("local_queue"):
        result["local_queue"] = kueue_query("localqueues", name=options["local_queue"])
    owner = objects.get(options["workload_owner"]) if options.get("workload_owner") else None
    queue = queue_name(owner)
    if owner and queue:
        result["workload"] = workload_of(kueue_query("workloads", all=True), owner)
        if result["workload"] and not admitted(result["workload"]):
            path = "/apis/%s/namespaces/%s/localqueues/%s/pendingworkloads" % (VISIBILITY_API_VERSION, namespace, queue)
            try:
                summary = request(reader.client, "GET", path, timeout=reader.module.params["request_timeout"])
            except RequestError:  # the visibility API is off, not allowed or unavailable: no position
                summary = None
            result["pending"] = pending_entry(summary, result["workload"]["metadata"]["name"])
            if options.get("eta"):
                result["eta"] = {
                    "cluster_queues": (reader.get("/apis/%s/clusterqueues" % KUEUE_API_VERSION) or {}).get("items") or [],
                    "devservers": (reader.get("/apis/%s/devservers" % options["user_api_version"]) or {}).get("items") or [],
                }
    if owner and queue and options.get("cluster_queue") and scaled_to_zero(owner):
        lq = result["local_queue"] if queue == options.get("local_queue") else kueue_query("localqueues", name=queue)
        cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        if cq_name:
            result["cluster_queue"] = kueue_query("clusterqueues", name=cq_name, cluster=True)
    # A priority class matters for a StatefulSet that is (or, created now, will be) queued.
    if (queue if owner else result["local_queue"]):
        result["priority_class"] = priority_class(reader, options, namespace, check=owner is None)
    return result


def scaled_to_zero(obj):
    """Whether a live object's spec.replicas is 0."""
    replicas = ((obj or {}).get("spec") or {}).get("replicas", 1)
    return replicas == 0 and not isinstance(replicas, bool)


def namespace_devuser(reader, namespace, label, api_version):
    """The DevUser the namespace's label ``label`` names, or None."""
    ns = reader.get("/api/v1/namespaces/" + namespace) or {}
    user = ((ns.get("metadata") or {}).get("labels") or {}).get(label)
    return reader.get("/apis/%s/devusers/%s" % (api_version, user)) if user else None


def priority_class(reader, options, namespace, check):
    """{name, source, exists} of the WorkloadPriorityClass that applies, or None."""
    name, source = options.get("priority_class") or "", "spec.priorityClassName"
    if not name and options.get("user_label"):
        devuser = namespace_devuser(reader, namespace, options["user_label"], options["user_api_version"])
        if devuser:
            name = ((devuser.get("spec") or {}).get("queue") or {}).get("priorityClass") or ""
            source = "DevUser %s spec.queue.priorityClass" % devuser["metadata"]["name"]
    if not name:
        return None
    exists = None
    if check:
        exists = reader.query({"api_version": KUEUE_API_VERSION, "plural": "workloadpriorityclasses",
                               "name": name, "cluster": True}, namespace) is not None
    return {"name": name, "source": source, "exists": exists}


def run(module):
    params = module.params
    reader = Reader(module, api_client(params))
    objects = {}
    for qname, query in sorted(params["queries"].items()):
        error = validate_query(qname, query)
        if error:
            module.fail_json(msg=error)
        if skipped(query):
            objects[qname] = None
            continue
        try:
            objects[qname] = reader.query(query, params.get("namespace"))
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    result = dict(changed=False, objects=objects)
    if params.get("devuser") is not None:
        result["devuser"] = namespace_devuser(reader, params.get("namespace"), params["devuser"]["label"],
                                              params["devuser"]["api_version"])
    if params.get("kueue") is not None:
        result["kueue"] = observe_kueue(reader, params["kueue"], params.get("namespace"), objects)
    module.exit_json(**result)


# The arguments (AnsibleModule's argument_spec; the action plugin of the same name validates
# them the same way, plugins/plugin_utils/controller_module.py).
ARGUMENT_SPEC = dict(
    namespace=dict(type="str"),
    queries=dict(type="dict", required=True),
    devuser=dict(type="dict", options=dict(
        label=dict(type="str", required=True),
        api_version=dict(type="str", default=API_VERSION),
    )),
    kueue=dict(type="dict", options=dict(
        resource_flavor=dict(type="str"),
        local_queue=dict(type="str"),
        workload_owner=dict(type="str"),
        priority_class=dict(type="str"),
        user_label=dict(type="str"),
        user_api_version=dict(type="str", default=API_VERSION),
        eta=dict(type="bool", default=False),
        cluster_queue=dict(type="bool", default=False),
    )),
    **AUTH_ARG_SPEC
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, run, "k8s_observe")


if __name__ == "__main__":
    main()
