"""Every plugin of the collection torchdev.operator is documented where ansible-doc finds it
(modules and lookups in their DOCUMENTATION, filters in the YAML file of their name beside
the filter plugins), and every filter is a thin adapter of a function in module_utils."""
from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess

import pytest

from _support import ROOT, tool

PLUGINS = ROOT / "plugins"
FILTER_FILES = sorted(p.stem for p in (PLUGINS / "filter").glob("*.py"))


def _filters() -> dict:
    """{filter name: wrapped function} of every filter plugin file."""
    out = {}
    for stem in FILTER_FILES:
        module = importlib.import_module("ansible_collections.torchdev.operator.plugins.filter." + stem)
        for name, func in module.FilterModule().filters().items():
            assert name not in out, "filter %s is registered twice" % name
            out[name] = func
    return out


FILTERS = _filters()
PLUGIN_NAMES = {
    "module": sorted(p.stem for p in (PLUGINS / "modules").glob("*.py")),
    "lookup": sorted(p.stem for p in (PLUGINS / "lookup").glob("*.py")),
    "filter": sorted(FILTERS),
}


def _ansible_doc(plugin_type: str, names: list[str]) -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([tool("ansible-doc"), "--json", "-t", plugin_type,
                           *("torchdev.operator." + n for n in names)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("plugin_type", sorted(PLUGIN_NAMES))
def test_every_plugin_has_docs(plugin_type):
    names = PLUGIN_NAMES[plugin_type]
    assert names, "no %s plugins found" % plugin_type
    docs = _ansible_doc(plugin_type, names)
    for name in names:
        entry = docs.get("torchdev.operator." + name) or {}
        doc = entry.get("doc") or {}
        assert doc.get("short_description"), "%s %s has no documentation" % (plugin_type, name)
        assert entry.get("examples"), "%s %s has no examples" % (plugin_type, name)
        if plugin_type == "filter":
            assert doc.get("name") == name
            params = list(inspect.signature(FILTERS[name].__wrapped__).parameters)
            assert set(doc["options"]) == {"_input", *params[1:]}, "%s: options do not match %s" % (name, params)
            assert (entry.get("return") or {}).get("_value", {}).get("description"), name


def test_no_filter_doc_without_a_filter():
    docs = {p.stem for p in (PLUGINS / "filter").glob("*.yml")}
    assert docs == set(FILTERS), "doc files without a filter: %s; filters without a doc file: %s" % (
        sorted(docs - set(FILTERS)), sorted(set(FILTERS) - docs))


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filters_are_thin_adapters_of_module_utils(name):
    func = FILTERS[name].__wrapped__
    assert func.__module__.startswith("ansible_collections.torchdev.operator.plugins.module_utils."), (
        "filter %s runs %s.%s: the decision belongs in plugins/module_utils" % (name, func.__module__, func.__qualname__))


def test_filter_errors_are_ansible_filter_errors():
    from ansible.errors import AnsibleFilterError

    assert FILTERS["quantity"]("1Gi") == "1Gi"
    with pytest.raises(AnsibleFilterError, match="^quantity: invalid quantity"):
        FILTERS["quantity"]("lots")
    with pytest.raises(AnsibleFilterError, match="^devuser_quota_hard: "):
        FILTERS["devuser_quota_hard"]({"storage": "lots"}, True)


def test_a_problem_with_a_reason_keeps_it_first():
    """A rendezvous problem raised in a template reaches failure_reason as "<Reason>: ..."."""
    from ansible.errors import AnsibleFilterError

    spec = {"owner": "a@b.c", "flavor": "gpu", "mode": "distributed",
            "distributed": {"worldSize": 16, "nprocsPerNode": 8, "backend": "nccl"}}
    flavor = {"gpu": {"type": "nvidia-a10g", "count": 4}}
    with pytest.raises(AnsibleFilterError) as info:
        FILTERS["rendezvous_env"](spec, flavor, name="x", namespace="ns")
    assert str(info.value).startswith("InsufficientGPUs: ")
    reason = FILTERS["failure_reason"]({"msg": str(info.value)})
    assert reason == {"reason": "InsufficientGPUs", "transient": False}
