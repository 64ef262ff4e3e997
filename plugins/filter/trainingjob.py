# -*- coding: utf-8 -*-
# Apache-2.0
"""TrainingJob filters: the spec and its problems, labels, what the role renders (env,
resources, tolerations, hyperparameters, the trainer's Role rules, the checkpoint claim,
Kueue's suspend), the lifecycle decision and the status. Each maps to a function in
plugins/module_utils/trainingjob.py or trainingjob_status.py (documented in the YAML file of
the filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob, trainingjob_status
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "trainingjob_spec": trainingjob.normalize,
            "trainingjob_spec_problem": trainingjob.spec_problem,
            "trainingjob_labels": trainingjob.labels,
            "trainingjob_selector_labels": trainingjob.selector_labels,
            "trainingjob_env": trainingjob.env,
            "trainingjob_resources": trainingjob.resources,
            "trainingjob_tolerations": trainingjob.tolerations,
            "trainingjob_hyperparameters": trainingjob.hyperparameters,
            "trainingjob_trainer_rules": trainingjob.trainer_rules,
            "trainingjob_checkpoint_claim": trainingjob.checkpoint_claim,
            "trainingjob_keep_suspend": trainingjob.keep_suspend,
            "trainingjob_keep_live_template": trainingjob.keep_live_template,
            "trainingjob_decide": trainingjob_status.decide,
            "trainingjob_ledger_patch": trainingjob_status.ledger_patch,
            "trainingjob_status": trainingjob_status.status,
            "trainingjob_rejected_status": trainingjob_status.rejected_status,
            "trainingjob_requeue": trainingjob_status.requeue,
            "trainingjob_eviction_event": trainingjob_status.eviction_event,
        })
