# -*- coding: utf-8 -*-
# Apache-2.0
"""EphemeralAccelerationJob filters: the spec and its problems, labels, what the role renders
(the volume's spec, the runner's arguments and env, resources, tolerations), the lifecycle
decision, the plan and the status.  Each maps to a function in
plugins/module_utils/ephemeralaccelerationjob.py or ephemeralaccelerationjob_status.py
(documented in the YAML file of the filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import ephemeralaccelerationjob as eaj
from ansible_collections.torchdev.operator.plugins.module_utils import ephemeralaccelerationjob_status as eaj_status
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "eaj_spec": eaj.normalize,
            "eaj_spec_problem": eaj.spec_problem,
            "eaj_labels": eaj.labels,
            "eaj_claim_spec": eaj.claim_spec,
            "eaj_runner_args": eaj.runner_args,
            "eaj_env": eaj.env,
            "eaj_resources": eaj.resources,
            "eaj_tolerations": eaj.tolerations,
            "eaj_decide": eaj_status.decide,
            "eaj_plan": eaj_status.converge,
            "eaj_status": eaj_status.status,
            "eaj_rejected_status": eaj_status.rejected_status,
            "eaj_settled": eaj_status.settled,
            "eaj_requeue": eaj_status.requeue,
            "eaj_pod_refusal": eaj_status.pod_refusal,
            "eaj_refused": eaj_status.refused,
        })
