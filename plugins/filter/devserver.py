# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServer filters: labels, env, the rendezvous, the spec's problems, the StatefulSet's
immutable fields and home volumes, Kueue, the lifecycle, and the status. Each maps to a function in
plugins/module_utils/ (documented in the YAML file of the filter's name beside this one)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import (
    devserver, devserver_status, eviction, kueue, labels, lifecycle, plan, rendezvous)
from ansible_collections.torchdev.operator.plugins.plugin_utils.filters import filter_map


class FilterModule(object):
    def filters(self):
        return filter_map({
            "devserver_labels": labels.devserver_labels,
            "devserver_selector_labels": labels.selector_labels,
            "devserver_stable_labels": labels.stable_labels,
            "devserver_env": devserver.env,
            "devserver_replicas": rendezvous.replicas,
            "devserver_spec_problem": devserver.spec_problem,
            "devserver_placement_problem": devserver.placement_problem,
            "devserver_owner_problem": devserver.owner_problem,
            "devserver_ssh_key_secret": devserver.ssh_key_secret,
            "devserver_ssh_service": devserver.ssh_service,
            "devserver_ssh_node": devserver.ssh_node_name,
            "devserver_ssh_access": devserver.ssh_access,
            "devserver_problem_requeue": devserver.problem_requeue,
            "rendezvous_env": rendezvous.rendezvous_env,
            "rendezvous_endpoint": rendezvous.rendezvous_endpoint,
            "rendezvous_errors": rendezvous.rendezvous_errors,
            "preserve_immutable": plan.preserve_immutable,
            "home_resizes": plan.home_resizes,
            "queue_labels": kueue.queue_labels,
            "queue_problem": kueue.queue_problem,
            "queue_status": kueue.queue_status,
            "queue_eta": kueue.queue_eta,
            "kueue_reshape": kueue.reshape,
            "devserver_status": devserver_status.devserver_status,
            "devserver_status_events": devserver_status.status_events,
            "devserver_evictions": eviction.server_evictions,
            "devserver_release": eviction.server_release,
            "rejected_spec_status": devserver_status.rejected_spec_status,
            "requeue_period": devserver_status.requeue_period,
            "devserver_lifecycle": devserver_status.devserver_lifecycle,
            "reservation_problem": lifecycle.reservation_problem,
            "stop_patch": lifecycle.stop_patch,
        })
