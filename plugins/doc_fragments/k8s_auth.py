# -*- coding: utf-8 -*-
# Apache-2.0
"""Documentation of the connection options every torchdev module takes
(module_utils/k8s.py AUTH_ARG_SPEC)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description: Path to a kubeconfig file.
    type: path
  context:
    description: Kubeconfig context to use.
    type: str
  host:
    description: API server URL (with I(api_key)).
    type: str
  api_key:
    description: Bearer token (with I(host)).
    type: str
  validate_certs:
    description: Verify the API server's certificate.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA bundle to verify the API server.
    type: path
    aliases: [ssl_ca_cert]
  request_timeout:
    description: Seconds to wait for each API request.
    type: int
    default: 30
notes:
  - Connection settings follow kubernetes.core (C(K8S_AUTH_KUBECONFIG), C(K8S_AUTH_CONTEXT),
    C(K8S_AUTH_HOST), C(K8S_AUTH_API_KEY), C(K8S_AUTH_VERIFY_SSL), C(K8S_AUTH_SSL_CA_CERT)),
    then C(KUBECONFIG), the in-cluster service account and C(~/.kube/config).
  - Requires the C(kubernetes) Python client.
"""
