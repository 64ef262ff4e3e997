#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0
"""Ansible module: read several Kubernetes objects in one module run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: torchdev_observe
short_description: Read several Kubernetes objects (by name or label selector) in one module run
description:
  - Each C(kubernetes.core.k8s_info) task starts a Python process and imports the
    Kubernetes client, about a second per task. A reconcile that reads its custom
    resource's flavor and every child it may own pays that once with this module.
  - One GET per named object (a missing object is C(null), not an error), one LIST per
    label-selected query. Read-only, so check mode changes nothing.
version_added: "0.1.0"
author: torchdev maintainers
extends_documentation_fragment:
  - torchdev_k8s
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
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Read a DevServer's flavor and StatefulSet, and its PVCs
  torchdev_observe:
    namespace: dev-alice
    queries:
      flavor: {api_version: torchdev.io/v1alpha1, plural: devserverflavors, name: gpu-a10g-1, cluster: true}
      statefulset: {api_version: apps/v1, plural: statefulsets, name: alice-dev}
      pvcs: {api_version: v1, plural: persistentvolumeclaims, label_selector: torchdev.io/devserver=alice-dev}
  register: observed

- name: Is Kueue served, and which DevServerFlavors exist?
  torchdev_observe:
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
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.torchdev_k8s import AUTH_ARG_SPEC, HAS_K8S, RequestError, api_client, request

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
    if query.get("label_selector"):
        path += "?" + urlencode({"labelSelector": query["label_selector"]})
    return path


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
    if sum(1 for k in ("name", "label_selector", "all") if query.get(k)) != 1:
        return "query %s needs exactly one of name and label_selector (or all: true)" % name
    return None


def run(module):
    params = module.params
    client = api_client(params)
    objects = {}
    for qname, query in sorted(params["queries"].items()):
        error = validate_query(qname, query)
        if error:
            module.fail_json(msg=error)
        try:
            path = query_path(query, params.get("namespace"))
            data = request(client, "GET", path, timeout=params["request_timeout"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        except RequestError as exc:
            if exc.status == 404 and (query.get("name") or query.get("discovery")):
                objects[qname] = None
                continue
            module.fail_json(msg="failed to read %s: %s %s" % (path, exc.status, exc.reason),
                             status=exc.status, reason=exc.reason, body=exc.body)
        if query.get("discovery"):
            resources = (data or {}).get("resources") or []
            objects[qname] = sorted(r["name"] for r in resources if "/" not in r.get("name", "/"))
        elif query.get("name"):
            objects[qname] = data
        else:
            kind = (data.get("kind") or "").rsplit("List", 1)[0]
            items = data.get("items") or []
            for item in items:  # list items carry no kind/apiVersion
                item.setdefault("apiVersion", query["api_version"])
                item.setdefault("kind", kind)
            objects[qname] = items
    module.exit_json(changed=False, objects=objects)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            namespace=dict(type="str"),
            queries=dict(type="dict", required=True),
            **AUTH_ARG_SPEC
        ),
        supports_check_mode=True,
    )
    if not HAS_K8S:
        module.fail_json(msg=missing_required_lib("kubernetes"))
    try:
        run(module)
    except Exception as exc:  # noqa: BLE001 - report any client error as a module failure
        module.fail_json(msg="torchdev_observe: %s" % exc, exception=traceback.format_exc())


if __name__ == "__main__":
    main()
