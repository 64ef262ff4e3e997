#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0
"""Ansible module: server-side apply of Kubernetes objects, one request per object."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k8s_apply
short_description: Server-side apply of Kubernetes objects, one PATCH each
description:
  - Sends each object of O(definition) as a server-side apply (C(PATCH) with
    C(application/apply-patch+yaml)) under O(field_manager), the request C(kubernetes.core.k8s)
    makes with C(apply) and C(server_side_apply), without its discovery and without a Python
    process of its own (the action plugin of the same name runs it in the controller; about a
    second per task with a fresh process per run, as under ansible-operator).
  - Apply creates an object that is missing and updates one that exists; the fields this
    field manager set before and no longer sets are removed. The caller decides what to send
    (the roles send only what differs; an unchanged object is not sent, no write request).
  - The resource of an object is its kind in lower case, in the plural (C(StatefulSet) ->
    C(statefulsets), C(NetworkPolicy) -> C(networkpolicies)), the convention of every built-in
    and torchdev kind; an object with C(metadata.namespace) is namespaced, one without
    cluster-scoped.
version_added: "0.2.0"
author: torchdev maintainers
extends_documentation_fragment:
  - torchdev.operator.k8s_auth
options:
  definition:
    description: The objects to apply (a list, or one object), each with C(apiVersion), C(kind) and C(metadata.name).
    type: raw
    required: true
  field_manager:
    description: The field manager of the apply.
    type: str
    required: true
  force_conflicts:
    description: Take over the fields another manager owns (C(force=true)) instead of failing with a conflict.
    type: bool
    default: false
notes:
  - Supports check mode (nothing is sent; the objects are returned as given).
  - An object whose namespace is being deleted (403 with the cause C(NamespaceTerminating), the
    namespace controller taking everything in it along) is not an error; it and the rest of
    that namespace's objects are skipped and the namespace is listed in RV(namespace_terminating).
"""

EXAMPLES = r"""
- name: Apply the objects that differ (server-side apply)
  torchdev.operator.k8s_apply:
    field_manager: torchdev-operator
    force_conflicts: true
    definition:
      - apiVersion: v1
        kind: ConfigMap
        metadata: {name: alice-dev-lifecycle, namespace: dev-alice}
        data: {idleTimeout: "3600"}
  register: applied
"""

RETURN = r"""
result:
  description:
    - The shape C(kubernetes.core.k8s) returns, so its readers work with either (the
      C(torchdev.operator.applied) filter). For one object, that object as the server
      returned it; for several, C(results), a list of C({result, changed, method}) in the
      order given.
  returned: success
  type: dict
namespace_terminating:
  description: The namespaces being deleted whose objects were skipped (see the notes).
  returned: success
  type: list
  elements: str
"""


import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchdev.operator.plugins.module_utils.conditions import default_plural, resource_path
from ansible_collections.torchdev.operator.plugins.module_utils.k8s import AUTH_ARG_SPEC, RequestError, api_client, request, run_module

try:
    from urllib.parse import urlencode
except ImportError:  # pragma: no cover - Python 2
    from urllib import urlencode


APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


def objects_of(definition):
    """The objects to apply, checked: a list (or one object) of dicts with apiVersion, kind and metadata.name."""
    objects = definition if isinstance(definition, list) else [definition]
    for obj in objects:
        if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind") or \
                not (obj.get("metadata") or {}).get("name"):
            raise ValueError("each object needs apiVersion, kind and metadata.name, got %s" % (json.dumps(obj)[:200],))
    return objects


def apply_path(obj, field_manager, force):
    """The PATCH path of one object's apply."""
    md = obj["metadata"]
    query = {"fieldManager": field_manager}
    if force:
        query["force"] = "true"
    return "%s?%s" % (resource_path(obj["apiVersion"], default_plural(obj["kind"]), md["name"], md.get("namespace")),
                      urlencode(query))


def namespace_terminating(code, status):
    """A create refused because the object's namespace is being deleted (kube-apiserver's
    NamespaceLifecycle admission: 403 with the cause NamespaceTerminating)."""
    if code != 403 or not isinstance(status, dict):
        return False
    causes = (status.get("details") or {}).get("causes") if isinstance(status.get("details"), dict) else None
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes or [])


def apply_result(results):
    """kubernetes.core.k8s's shape: one object, or {results: [...]}."""
    if len(results) == 1:
        return results[0]["result"]
    return {"results": results}


def run(module):
    params = module.params
    try:
        objects = objects_of(params["definition"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not objects:
        module.exit_json(changed=False, result={"results": []})
    if module.check_mode:
        module.exit_json(changed=True, result=apply_result([dict(result=o, changed=True, method="apply") for o in objects]))
    client = api_client(params)
    results = []
    terminating = set()
    for obj in objects:
        if obj["metadata"].get("namespace") in terminating:
            continue
        path = apply_path(obj, params["field_manager"], params["force_conflicts"])
        # The object itself, not its JSON text: every client generation serialises a dict for an
        # apply-patch+yaml body (JSON is YAML), while kubernetes 33 (the base image's) would
        # serialise a string once more, into a JSON string ("apply patch must be an object").
        try:
            applied = request(client, "PATCH", path, body=obj, content_type=APPLY_CONTENT_TYPE,
                              timeout=params["request_timeout"])
        except RequestError as exc:
            body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else exc.body
            try:
                status = json.loads(body)
                message = status.get("message") or body
            except (TypeError, ValueError, AttributeError):
                status, message = {}, body
            if namespace_terminating(exc.status, status):
                # Its namespace is being deleted and takes everything in it along: nothing to converge.
                terminating.add(obj["metadata"].get("namespace"))
                continue
            module.fail_json(msg="failed to apply %s %s: %s %s: %s" % (obj["kind"], obj["metadata"]["name"], exc.status,
                                                                         exc.reason, message),
                             status=exc.status, reason=exc.reason, error=exc.status)
        results.append(dict(result=applied, changed=True, method="apply"))
    if not results:
        module.exit_json(changed=False, result={"results": []}, namespace_terminating=sorted(terminating))
    module.exit_json(changed=True, result=apply_result(results), namespace_terminating=sorted(terminating))


# The arguments (AnsibleModule's argument_spec; the action plugin of the same name validates
# them the same way, plugins/plugin_utils/controller_module.py).
ARGUMENT_SPEC = dict(
    definition=dict(type="raw", required=True),
    field_manager=dict(type="str", required=True),
    force_conflicts=dict(type="bool", default=False),
    **AUTH_ARG_SPEC
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, run, "k8s_apply")


if __name__ == "__main__":
    main()
