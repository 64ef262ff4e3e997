# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters every role uses: quantities, hashes, ownership, the reconcile plan, status
writes and failures. Each maps to a function in plugins/module_utils/ (documented in the
YAML file of the filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import conditions, devserver_status, labels, plan, quantity
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "quantity": quantity.quantity,
            "checksum": plan.checksum,
            "owner_reference": labels.owner_reference,
            "stamp": plan.stamp,
            "observed": plan.observed_objects,
            "drift": plan.drift,
            "plan": plan.plan,
            "find": plan.find,
            "applied": plan.applied_objects,
            "status_changes": conditions.status_changes,
            "problem_status": conditions.problem_status,
            "failure_reason": conditions.failure_reason,
            "failure_message": conditions.failure_message,
            "retryable": conditions.retryable,
            "pod_refused_event": devserver_status.degraded_event,
        })
