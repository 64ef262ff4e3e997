# -*- coding: utf-8 -*-
# Apache-2.0
"""Action plugin for `requeue_after` (documented in plugins/modules/requeue_after.py).

It runs in the controller: the module only returns its argument, so starting a Python
process on the target for it (~0.5 s per reconcile) would be pure overhead.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.torchdev.operator.plugins.module_utils.durations import check_period
from ansible_collections.torchdev.operator.plugins.plugin_utils.preload import jinja_plugins

# Loaded in the controller's process: the later tasks' forks find our filters imported (preload.py).
jinja_plugins()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("period",))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        if "period" not in self._task.args:
            raise AnsibleActionFail("requeue_after: missing required argument: period")
        try:
            period = check_period(self._task.args["period"])
        except ValueError as exc:
            raise AnsibleActionFail("requeue_after: %s" % exc)
        result.update(changed=False, period=period)
        return result
