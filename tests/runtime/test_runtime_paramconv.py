"""paramconv: cases copied from ansible-operator-plugins internal/ansible/paramconv/paramconv_test.go
plus a few torchdev spec keys and nested structures."""
from __future__ import annotations

import pytest

from torchdev_runtime.paramconv import map_to_camel, map_to_snake, to_camel, to_snake

# TestToSnake (paramconv_test.go)
TO_SNAKE = [
    ("should keep the same", "var", "var"),
    ("should convert to Snake when is only numbers", "888", "888"),
    ("should convert to Snake when has numbers and _", "k8s_var", "k8s_var"),
    ("should convert to Snake when start with _", "_k8s_var", "_k8s_var"),
    ("should convert to Snake and replace the space for _", "k8s var", "k8s_var"),
    ("should handle Camel and add _ prefix when starts with", "ThisShouldHaveUnderscores",
     "_this_should_have_underscores"),
    ("should convert to snake when has Camel and numbers", "sizeK8sBuckets", "size_k8s_buckets"),
    ("should be able to handle mixed vars", "_CanYou_Handle_mixedVars",
     "_can_you_handle_mixed_vars"),
    ("should be a noop", "this_should_be_a_noop", "this_should_be_a_noop"),
    ("should handle special plural word at end", "egressIPs", "egress_ips"),
    ("should handle special plural word in middle", "egressIPsEgress", "egress_ips_egress"),
    ("should handle special plural word in middle followed by lowercase letter",
     "egressIPsegress", "egress_ips_egress"),
    ("should handle special plural word at the start", "IPsegress", "_ips_egress"),
    ("should handle special word at the end", "egressIP", "egress_ip"),
    ("should handle special word in the middle", "egressIPEgress", "egress_ip_egress"),
    ("should handle special word in the middle followed by lowercase", "egressIPegress",
     "egress_ip_egress"),
    ("should handle multiple special words", "URLegressIPEgressHTTP",
     "url_egress_ip_egress_http"),
    ("should handle multiple plural special words", "URLsegressIPsEgressHTTPs",
     "_urls_egress_ips_egress_https"),
    ("should not interpret special word when entire word is uppercase",
     "THIS_IS_SKIP_NOT_SK_IP", "_this_is_skip_not_sk_ip"),
    # beyond the Go table: keys of the torchdev CRDs and acronym handling
    ("torchdev: camel", "gpuCount", "gpu_count"),
    ("torchdev: plural camel", "sshPublicKeys", "ssh_public_keys"),
    ("acronym at start", "JSONData", "_json_data"),
    ("special word in the middle of camel", "podIPAddress", "pod_ip_address"),
    ("digits then word", "nvidiaA100Count", "nvidia_a100_count"),
    ("dash", "foo-bar", "foo_bar"),
]

# TestToCamel (paramconv_test.go)
TO_CAMEL = [
    ("should convert to Camel", "app_test", "appTest"),
    ("should convert to Camel when start with _", "_app_test", "AppTest"),
    ("should convert to Camel when has numbers", "_app_test_k8s", "AppTestK8s"),
    ("should convert to Camel when has numbers and _", "var_k8s", "varK8s"),
    ("should handle special words", "egressIPs", "egressIPs"),
]


@pytest.mark.parametrize("name,given,want", TO_SNAKE, ids=[c[0] for c in TO_SNAKE])
def test_to_snake(name, given, want):
    assert to_snake(given) == want


@pytest.mark.parametrize("name,given,want", TO_CAMEL, ids=[c[0] for c in TO_CAMEL])
def test_to_camel(name, given, want):
    assert to_camel(given) == want


def test_map_to_snake_go_table():
    # TestMapToSnake
    given = {"var": "value", "var_var": "value", "size_k8s_test": "value", "888": "value"}
    assert map_to_snake(given) == given


def test_map_to_camel_go_table():
    # TestMapToCamel
    given = {"var": "value", "appService": "value", "app_8sk_": "value",
             "_app_8sk_test": "value"}
    assert map_to_camel(given) == {"var": "value", "appService": "value", "app8Sk": "value",
                                   "App8SkTest": "value"}


def test_map_to_snake_is_recursive_into_maps_and_lists():
    spec = {
        "gpuCount": 2,
        "resources": {"limitsCPU": "2", "nodeSelector": {"nodePool": "a100"}},
        "volumes": [{"mountPath": "/data", "claimName": "x"}, "plainString", ["nestedList"]],
        "envVars": {"MY_VAR": "keepValueCase"},
    }
    assert map_to_snake(spec) == {
        "gpu_count": 2,
        "resources": {"limits_cpu": "2", "node_selector": {"node_pool": "a100"}},
        "volumes": [{"mount_path": "/data", "claim_name": "x"}, "plainString", ["nestedList"]],
        # like Go, keys of user maps are converted too (values never are)
        "env_vars": {"_my_var": "keepValueCase"},
    }
