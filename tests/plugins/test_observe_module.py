"""torchdev_observe: the pure parts (paths, query checks) and a real run against kubesim."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    # The module imports ansible.module_utils.torchdev_k8s; alias the file for a plain import.
    spec = importlib.util.spec_from_file_location(
        "ansible.module_utils.torchdev_k8s", ROOT / "plugins" / "module_utils" / "torchdev_k8s.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["ansible.module_utils.torchdev_k8s"] = mod
    spec = importlib.util.spec_from_file_location("torchdev_observe", ROOT / "plugins" / "modules" / "torchdev_observe.py")
    obs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(obs)
    return obs


observe = _load()


@pytest.mark.parametrize("query,ns,path", [
    ({"api_version": "v1", "plural": "services", "name": "x"}, "dev", "/api/v1/namespaces/dev/services/x"),
    ({"api_version": "apps/v1", "plural": "statefulsets", "name": "x", "namespace": "other"}, "dev",
     "/apis/apps/v1/namespaces/other/statefulsets/x"),
    ({"api_version": "torchdev.io/v1alpha1", "plural": "devserverflavors", "name": "f", "cluster": True}, None,
     "/apis/torchdev.io/v1alpha1/devserverflavors/f"),
    ({"api_version": "v1", "plural": "persistentvolumeclaims", "label_selector": "a=b,c in (d)"}, "dev",
     "/api/v1/namespaces/dev/persistentvolumeclaims?labelSelector=a%3Db%2Cc+in+%28d%29"),
])
def test_query_path(query, ns, path):
    assert observe.query_path(query, ns) == path


def test_query_path_needs_a_namespace():
    with pytest.raises(ValueError, match="needs a namespace"):
        observe.query_path({"api_version": "v1", "plural": "services", "name": "x"}, None)


@pytest.mark.parametrize("query,error", [
    ({"plural": "services", "name": "x"}, "needs api_version"),
    ({"api_version": "v1", "name": "x"}, "needs plural"),
    ({"api_version": "v1", "plural": "services"}, "exactly one of name and label_selector"),
    ({"api_version": "v1", "plural": "services", "name": "x", "label_selector": "a=b"}, "exactly one"),
    ("nope", "must be a dict"),
    ({"api_version": "v1", "plural": "services", "name": "x"}, None),
])
def test_validate_query(query, error):
    got = observe.validate_query("q", query)
    assert (got is None) if error is None else (error in got)


def test_module_reads_objects_and_missing_ones(kubesim, tmp_path):
    args = {"ANSIBLE_MODULE_ARGS": {"namespace": "default", "queries": {
        "ns": {"api_version": "v1", "plural": "namespaces", "name": "default", "cluster": True},
        "missing": {"api_version": "v1", "plural": "services", "name": "nope"},
        "classes": {"api_version": "storage.k8s.io/v1", "plural": "storageclasses", "label_selector": "!x",
                    "cluster": True},
    }}}
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps(args))
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=kubesim.kubeconfig)
    code = (
        "import sys, importlib.util, runpy;"
        f"spec = importlib.util.spec_from_file_location('ansible.module_utils.torchdev_k8s', {str(ROOT / 'plugins' / 'module_utils' / 'torchdev_k8s.py')!r});"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
        "sys.modules['ansible.module_utils.torchdev_k8s'] = m;"
        f"sys.argv = ['x', {str(argfile)!r}];"
        f"runpy.run_path({str(ROOT / 'plugins' / 'modules' / 'torchdev_observe.py')!r}, run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    result = json.loads(out.stdout)
    assert not result.get("failed"), result
    objects = result["objects"]
    assert objects["ns"]["metadata"]["name"] == "default"
    assert objects["missing"] is None
    assert {o["metadata"]["name"] for o in objects["classes"]} >= {"gp3", "efs-sc"}
    assert all(o["kind"] == "StorageClass" for o in objects["classes"])
    assert kubesim.writes() == 0
