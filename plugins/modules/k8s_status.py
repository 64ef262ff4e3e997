#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0
"""Ansible module: write the status of a torchdev custom resource, only when it changes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k8s_status
short_description: Merge-patch the status subresource of a custom resource, only when it changes
description:
  - GETs the custom resource, merges the desired status fields and metav1.Conditions into
    the live status and sends one JSON merge patch to the C(/status) subresource when, and
    only when, something changed. An unchanged status makes zero write requests and
    returns C(changed=false).
  - Conditions are merged by C(type). C(lastTransitionTime) is kept while a condition's
    C(status) is unchanged (a new reason or message alone is not a transition) and set to
    the current time when the status changes or the condition is new. Conditions of types
    not given are kept.
  - Replaces C(operator_sdk.util.k8s_status), which is not available to torchdev.
version_added: "0.1.0"
author: torchdev maintainers
extends_documentation_fragment:
  - torchdev.operator.k8s_auth
options:
  api_version:
    description: API version of the resource, C(group/version).
    type: str
    required: true
  kind:
    description: Kind of the resource, e.g. C(DevServer).
    type: str
    required: true
  plural:
    description: Resource plural; derived from I(kind) when omitted.
    type: str
  name:
    description: Name of the resource.
    type: str
    required: true
  namespace:
    description: Namespace of the resource; omit for cluster-scoped resources.
    type: str
  status:
    description: Status fields to set. A C(null) value removes the field. Fields not named are left alone.
    type: dict
    default: {}
  conditions:
    description: metav1.Conditions (type, status, reason, message[, observedGeneration]) to merge by type.
    type: list
    elements: dict
  observed_generation:
    description: Default C(observedGeneration) for conditions that do not carry one.
    type: int
notes:
  - Supports check mode (the GET is made, the PATCH is not).
"""

EXAMPLES = r"""
- name: Record the DevServer status
  torchdev.operator.k8s_status:
    api_version: torchdev.io/v1alpha1
    kind: DevServer
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    observed_generation: "{{ _torchdev_io_devserver.metadata.generation }}"
    status:
      phase: Running
      observedGeneration: "{{ _torchdev_io_devserver.metadata.generation }}"
      sshEndpoint: null
    conditions:
      - type: Ready
        status: "True"
        reason: ServerReady
        message: 1/1 replicas ready
"""

RETURN = r"""
status:
  description: The status after the merge (what the object now has, or would have in check mode).
  returned: success
  type: dict
patch:
  description: The merge patch sent to the status subresource; null when nothing changed.
  returned: success
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchdev.operator.plugins.module_utils.conditions import default_plural, resource_path, status_patch
from ansible_collections.torchdev.operator.plugins.module_utils.k8s import AUTH_ARG_SPEC, RequestError, api_client, request, run_module


def run(module):
    params = module.params
    if "/" not in params["api_version"]:
        module.fail_json(msg="k8s_status handles custom resources (api_version group/version), got %s" % params["api_version"])
    plural = params.get("plural") or default_plural(params["kind"])
    name, namespace = params["name"], params.get("namespace") or None
    timeout = params["request_timeout"]

    client = api_client(params)
    try:
        live = request(client, "GET", resource_path(params["api_version"], plural, name, namespace), timeout=timeout)
    except RequestError as exc:
        if exc.status == 404:
            # Deleted while we reconciled: nothing to record.
            module.exit_json(changed=False, status={}, patch=None, msg="%s %s not found" % (params["kind"], name))
        module.fail_json(msg="failed to get %s %s: %s %s" % (params["kind"], name, exc.status, exc.reason),
                         status_code=exc.status, reason=exc.reason, body=exc.body)

    try:
        patch, result = status_patch(
            live.get("status"), params.get("status"), params.get("conditions"),
            observed_generation=params.get("observed_generation"))
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    if patch is None:
        module.exit_json(changed=False, status=result, patch=None)
    if module.check_mode:
        module.exit_json(changed=True, status=result, patch=patch)

    body = {"status": patch}
    try:
        request(client, "PATCH", resource_path(params["api_version"], plural, name, namespace, "status"),
                body=body, content_type="application/merge-patch+json", timeout=timeout)
    except RequestError as exc:
        if exc.status == 404:
            module.exit_json(changed=False, status={}, patch=None, msg="%s %s was deleted" % (params["kind"], name))
        module.fail_json(msg="failed to patch the status of %s %s: %s %s" % (params["kind"], name, exc.status, exc.reason),
                         status_code=exc.status, reason=exc.reason, body=exc.body, patch=patch)
    module.exit_json(changed=True, status=result, patch=patch)


# The arguments (AnsibleModule's argument_spec; the action plugin of the same name validates
# them the same way, plugins/plugin_utils/controller_module.py).
ARGUMENT_SPEC = dict(
    api_version=dict(type="str", required=True),
    kind=dict(type="str", required=True),
    plural=dict(type="str"),
    name=dict(type="str", required=True),
    namespace=dict(type="str"),
    status=dict(type="dict", default={}),
    conditions=dict(type="list", elements="dict"),
    observed_generation=dict(type="int"),
    **AUTH_ARG_SPEC
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, run, "k8s_status")


if __name__ == "__main__":
    main()
