# -*- coding: utf-8 -*-
# Apache-2.0
"""Action plugin for `k8s_observe` (documented in plugins/modules/k8s_observe.py): the module's own code,
run in the controller (plugins/plugin_utils/controller_module.py).  It only makes HTTP requests
to the API server, so a Python process per task (about a second with a fresh process per run,
as under ansible-operator) would be pure overhead."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.modules.k8s_observe import ARGUMENT_SPEC, run
from ansible_collections.torchdev.operator.plugins.plugin_utils.controller_module import controller_action

ActionModule = controller_action("k8s_observe", ARGUMENT_SPEC, run)
