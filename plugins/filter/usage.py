# -*- coding: utf-8 -*-
# Apache-2.0
"""UsageRecord filters: the record of an ended reservation, its name and labels, and when the
DevUser role prunes its namespace's records. Each maps to a function in plugins/module_utils/
(documented in the YAML file of the filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import labels, usage
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "usage_record": usage.usage_record,
            "job_usage_record": usage.job_usage_record,
            "job_usage_record_name": usage.job_usage_record_name,
            "usage_record_name": usage.usage_record_name,
            "usage_labels": labels.usage_labels,
            "usage_prune": usage.usage_prune,
            "usage_prune_due": usage.usage_prune_due,
            "usage_write_needed": usage.usage_write_needed,
        })
