# -*- coding: utf-8 -*-
# Apache-2.0
"""DevUser filters: the spec and its problems, labels, Kueue quotas, ResourceQuota and
LimitRange, what to prune, replace, detach and suspend, the namespace, and the status.
Each maps to a function in plugins/module_utils/ (documented in the YAML file of the
filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import devuser, devuser_status, labels
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "devuser_spec": devuser.spec,
            "devuser_problem": devuser.problem,
            "devuser_labels": labels.devuser_labels,
            "devuser_kueue": devuser.kueue_served,
            "devuser_resource_groups": devuser.resource_groups,
            "devuser_quota_hard": devuser.quota_hard,
            "devuser_limits": devuser.limits,
            "devuser_redact": devuser.redact,
            "devuser_prune": devuser.prune,
            "devuser_replace": devuser.replace,
            "devuser_detach": devuser.detach,
            "devuser_suspend": devuser.suspend,
            "devuser_namespace": devuser.namespace_claim,
            "devuser_status": devuser_status.devuser_status,
            "devuser_quota_pending": devuser_status.quota_pending,
        })
