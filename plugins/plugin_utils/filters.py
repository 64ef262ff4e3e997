# -*- coding: utf-8 -*-
# Apache-2.0
"""What every torchdev filter plugin shares: the decisions are plain functions in
plugins/module_utils/, and a filter file only maps filter names to them through
``filter_map``, which turns their errors into ``AnsibleFilterError``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def _wrap(name, func):
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (ValueError, TypeError, KeyError) as exc:
            reason = getattr(exc, "reason", None)
            # "<Reason>: <message>" lets failure_reason classify a problem raised in a template.
            raise AnsibleFilterError("%s: %s" % (reason or name, exc))

    wrapper.__name__ = name
    wrapper.__doc__ = func.__doc__
    wrapper.__wrapped__ = func
    return wrapper


def filter_map(functions):
    """{filter name: wrapped function} for a FilterModule's ``filters()``."""
    return {name: _wrap(name, func) for name, func in functions.items()}
