"""Table-driven tests of plugins/module_utils/labels.py."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import labels



@pytest.mark.parametrize("email,label", [
    ("jane@example.com", "jane_at_example.com"),
    ("j.o+x@ex-ample.co.uk", "j.o-x_at_ex-ample.co.uk"),
    ("-weird@x.y", "weird_at_x.y"),
])
def test_owner_label(email, label):
    assert labels.owner_label(email) == label


def test_owner_label_long_is_truncated_with_hash():
    value = labels.owner_label("a" * 80 + "@example.com")
    assert len(value) <= 63 and value[-9] == "-"
    assert value != labels.owner_label("a" * 81 + "@example.com")


def test_labels_and_selector():
    got = labels.devserver_labels("x", "a@b.c", "gpu")
    assert got["app.kubernetes.io/name"] == "devserver"
    assert got["torchdev.io/owner"] == "a_at_b.c" and got["torchdev.io/flavor"] == "gpu"
    assert set(labels.selector_labels("x").items()) <= set(got.items())
    assert set(labels.stable_labels("x").items()) <= set(got.items())
    assert "torchdev.io/flavor" not in labels.stable_labels("x")


def test_usage_labels_select_by_server_owner_and_flavor_but_not_as_a_server():
    out = labels.usage_labels("dev", "jane@example.com", "gpu-a10g-1")
    assert out == {"app.kubernetes.io/name": "usagerecord", "app.kubernetes.io/instance": "dev",
                   "app.kubernetes.io/part-of": "torchdev", "app.kubernetes.io/managed-by": "torchdev-operator",
                   "torchdev.io/devserver": "dev", "app.kubernetes.io/component": "usage",
                   "torchdev.io/owner": "jane_at_example.com", "torchdev.io/flavor": "gpu-a10g-1"}
    # the DevServer's pod selector does not match a record
    assert not set(labels.selector_labels("dev").items()) <= set(out.items())


def test_flavor_labels_of_the_resource_flavor_in_their_order():
    """The ResourceFlavor's labels (roles/devserverflavor), in the order the template wrote them."""
    assert list(labels.flavor_labels("gpu-a10g-1").items()) == [
        ("app.kubernetes.io/name", "devserverflavor"), ("app.kubernetes.io/part-of", "torchdev"),
        ("app.kubernetes.io/managed-by", "torchdev-operator"), ("torchdev.io/flavor", "gpu-a10g-1")]
