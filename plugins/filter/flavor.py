# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServerFlavor filters: GPUs, consistency, resources, the pod-shaping hash, the
DevServers that use a flavor, and its Kueue ResourceFlavor. Each maps to a function in
plugins/module_utils/ (documented in the YAML file of the filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import flavor, kueue, labels
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "flavor_gpu_count": flavor.flavor_gpu_count,
            "flavor_errors": flavor.flavor_errors,
            "flavor_problem": flavor.flavor_problem,
            "flavor_resources": flavor.resources,
            "flavor_hash": flavor.flavor_hash,
            "flavor_status": flavor.flavor_status,
            "flavor_users": flavor.flavor_users,
            "flavor_labels": labels.flavor_labels,
            "flavor_notices": flavor.flavor_notices,
            "resource_flavor_errors": kueue.resource_flavor_errors,
            "kueue_node_taints": kueue.node_taints,
        })
