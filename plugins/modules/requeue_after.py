#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0
"""Ansible module: ask the operator to reconcile this object again after a period."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: requeue_after
short_description: Ask ansible-operator to run the reconcile again after a period
description:
  - Returns C(period). ansible-operator (and torchdev-runtime) read the result of a task
    whose action is C(requeue_after) or C(operator_sdk.util.requeue_after) and requeue the
    custom resource after that period, instead of the watch's C(reconcilePeriod).
  - Same contract as C(operator_sdk.util.requeue_after), which is not installable outside
    the ansible-operator image; ansible-operator accepts this bare action name too.
  - Makes no API request; supports check mode. The work is done by the action plugin of
    the same name (plugins/action/requeue_after.py), in the controller, without a module process.
  - Roles use the bare name C(requeue_after), resolved through the C(collections) list of
    the role's meta, because ansible-operator honours only C(requeue_after) and
    C(operator_sdk.util.requeue_after), by the task's action name.
version_added: "0.1.0"
author: torchdev maintainers
options:
  period:
    description:
      - A Go duration (C(5s), C(1m30s)). An empty string requeues nothing.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Look again in 5 seconds while the pods start
  requeue_after:
    period: 5s
"""

RETURN = r"""
period:
  description: The period the operator will wait before the next reconcile.
  returned: always
  type: str
  sample: 5s
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchdev.operator.plugins.module_utils.durations import check_period


def main():
    module = AnsibleModule(argument_spec=dict(period=dict(type="str", required=True)),
                           supports_check_mode=True)
    try:
        period = check_period(module.params["period"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, period=period)


if __name__ == "__main__":
    main()
