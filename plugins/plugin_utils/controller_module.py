# -*- coding: utf-8 -*-
# Apache-2.0
"""Our Kubernetes modules, run by their action plugins in the controller.

A module task costs a Python process: the AnsiballZ payload built and unpacked, Ansible's
module_utils and the Kubernetes client imported, about a second per task with a fresh process
per run (ansible-operator). k8s_observe and k8s_status only make HTTP requests to the API
server, from the same host as the controller (ansible-operator runs the roles on localhost), so
their action plugins run the module's own ``run(module)`` in the ``ansible-playbook`` process:
the arguments validated against the module's own ``ARGUMENT_SPEC`` (what AnsibleModule does
with them), the same requests, the same result; the client is imported once per run.

``controller_action`` makes such an action plugin's ``ActionModule``; ``ControllerModule`` is
the part of AnsibleModule those ``run`` functions use: ``params``, ``check_mode``,
``exit_json`` and ``fail_json``.  Importing this module also imports the collection's filter and
lookup plugins into the controller's process (preload.py): an action plugin is loaded there
before its task's worker is forked.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible_collections.torchdev.operator.plugins.plugin_utils.preload import jinja_plugins

jinja_plugins()


class _Exit(BaseException):
    """exit_json / fail_json: ends ``run`` like the module's sys.exit (not caught by
    ``except Exception``)."""

    def __init__(self, result):
        BaseException.__init__(self)
        self.result = result


class ControllerModule(object):
    """What the modules' ``run(module)`` needs of AnsibleModule, in the controller."""

    def __init__(self, name, argument_spec, args, check_mode=False):
        validated = ArgumentSpecValidator(argument_spec).validate(dict(args))
        if validated.error_messages:
            raise AnsibleActionFail("%s: %s" % (name, "; ".join(validated.error_messages)))
        self.params = validated.validated_parameters
        self.check_mode = bool(check_mode)

    def exit_json(self, **result):
        result.setdefault("changed", False)
        raise _Exit(json_result(result))

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        raise _Exit(json_result(result))


def json_result(value):
    """``value`` as a module's JSON answer would carry it: text for bytes (a failed request's
    body), lists for tuples and sets, text for any other object.  A result the stdout callback
    cannot serialize loses the task's event (ansible-runner's callback writes nothing for it):
    a failed task would look like no task at all."""
    if isinstance(value, bytes):
        return to_text(value, errors="replace")
    if isinstance(value, dict):
        return dict((to_text(k) if isinstance(k, bytes) else k, json_result(v)) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_result(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return to_text(value)


def run_in_controller(name, argument_spec, run, args, check_mode=False):
    """The result of module ``name``'s ``run(module)`` with the task's arguments."""
    # imported here: the Kubernetes client is loaded only by a run that uses it
    from ansible_collections.torchdev.operator.plugins.module_utils.k8s import run_module

    module = ControllerModule(name, argument_spec, args, check_mode)
    try:
        run_module(module, run, name)
    except _Exit as done:
        return done.result
    return {"changed": False}


def controller_action(name, argument_spec, run):
    """The ActionModule class of module ``name``: its ``run(module)`` in the controller."""

    class ActionModule(ActionBase):
        TRANSFERS_FILES = False

        def run(self, tmp=None, task_vars=None):
            result = super(ActionModule, self).run(tmp, task_vars)
            result.update(run_in_controller(name, argument_spec, run, self._task.args, self._task.check_mode))
            return result

    ActionModule.__doc__ = "Module %s, run in the controller." % name
    return ActionModule
