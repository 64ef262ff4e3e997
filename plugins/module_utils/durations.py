# -*- coding: utf-8 -*-
# Apache-2.0
"""Go durations (``5s``, ``1m30s``) as ansible-operator's requeue_after reads them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


def check_period(period):
    """The period as a Go duration string ('' requeues nothing); ValueError otherwise."""
    period = "" if period is None else str(period).strip()
    if period and not _DURATION.match(period):
        raise ValueError("period must be a Go duration such as 5s or 1m30s, got %r" % period)
    return period
