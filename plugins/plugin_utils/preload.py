# -*- coding: utf-8 -*-
# Apache-2.0
"""Import the collection's filter and lookup plugins once, in the ansible-playbook process.

Ansible runs every task in a fresh fork of the controller's process (WorkerProcess). A task
whose templates use one of our filters makes its fork import every filter file of the
collection (the Jinja2 plugin loader looks a collection filter up file by file,
``Jinja2Loader.get_with_context``) with the module_utils they import, compiled from source
(the collection loader keeps no bytecode): about 50 ms per task, paid again by the next task's
fork. Imported once in the controller's own process, they are in the ``sys.modules`` of every
later fork, where the plugin loader takes them from (``PluginLoader._load_module_source``).

Our action plugins call ``jinja_plugins()`` when they are imported: Ansible's linear strategy
loads a task's action plugin in the controller's process (``action_loader.get(...,
class_only=True)``) before it forks the task's worker. Nothing changes in what runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import pkgutil

PLUGIN_PACKAGES = (
    "ansible_collections.torchdev.operator.plugins.filter",
    "ansible_collections.torchdev.operator.plugins.lookup",
)


def jinja_plugins(packages=PLUGIN_PACKAGES):
    """Import every plugin file of ``packages``; the names imported (a failure is left to the
    task that uses the plugin, which reports it as it would have)."""
    done = []
    for package in packages:
        try:
            path = importlib.import_module(package).__path__
        except ImportError:
            continue
        for info in pkgutil.iter_modules(path):
            name = "%s.%s" % (package, info.name)
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - reported by the task that uses it
                continue
            done.append(name)
    return done
