# -*- coding: utf-8 -*-
# Apache-2.0
"""Lookup plugin: torchdev's constants (plugins/module_utils/constants.py) for the roles."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: constants
author: torchdev maintainers
version_added: "0.1.0"
short_description: The names and numbers torchdev's parts agree on
description:
  - Returns the constants of C(plugins/module_utils/constants.py) (API group and version,
    field manager, label and annotation keys, ports, naming conventions, condition reasons)
    as one mapping keyed by the lower-cased constant name, e.g. C(api_version), C(ssh_port).
  - With terms, returns the value of each named constant instead.
  - The C(common) role's defaults put the whole mapping into the variable C(torchdev).
options:
  _terms:
    description: Names of constants (lower- or upper-case); none for the whole mapping.
    required: false
"""

EXAMPLES = r"""
- name: The API version of the torchdev kinds
  ansible.builtin.debug:
    msg: "{{ lookup('torchdev.operator.constants', 'api_version') }}"

- name: Every constant
  ansible.builtin.debug:
    msg: "{{ lookup('torchdev.operator.constants') }}"
"""

RETURN = r"""
_raw:
  description: The whole mapping (no terms), or the value of each term.
  type: list
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.torchdev.operator.plugins.module_utils.constants import as_dict


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        constants = as_dict()
        if not terms:
            return [constants]
        try:
            return [constants[str(term).lower()] for term in terms]
        except KeyError as exc:
            raise AnsibleLookupError("torchdev.operator.constants: no constant %s" % exc)
