"""plugins/module_utils/constants.py: the names and numbers torchdev's parts agree on, and the
copies of them in code that runs where the collection is not (the training pods)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import constants as C
from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob
from torchdev_train import status as train_status


@pytest.mark.parametrize("name,value", [
    ("API_VERSION", "torchdev.io/v1alpha1"),
    ("DEVSERVER_LABEL", "torchdev.io/devserver"),
    ("CONFIG_HASH_ANNOTATION", "torchdev.io/config-hash"),
    ("SCRIPTS_HASH_ANNOTATION", "torchdev.io/scripts-hash"),
    ("USAGE_FINALIZER", "torchdev.io/devserver-usage"),
    ("RELEASED_EVICTION_ANNOTATION", "torchdev.io/released-eviction"),
    ("KUEUE_HOLD_ANNOTATION", "torchdev.io/kueue-hold"),
    ("NAMESPACE_PREFIX", "dev-"),
    ("LOCAL_QUEUE", "torchdev"),
    ("SSH_PORT", 2222),
])
def test_values(name, value):
    """Changing one of these changes the API contract (docs/api.md): a test must say so."""
    assert getattr(C, name) == value


def test_as_dict_is_every_public_constant_lower_cased():
    consts = C.as_dict()
    assert consts["api_version"] == C.API_VERSION and consts["ssh_port"] == C.SSH_PORT
    assert "as_dict" not in consts and all(key == key.lower() for key in consts)
    assert len(consts) == len([n for n in vars(C) if n.isupper() and not n.startswith("_")])


def test_the_training_library_defaults_are_the_constants():
    """torchdev_train runs in the training pods without the collection: the operator passes the
    values in the env (trainingjob.env) and the library's defaults are the same."""
    assert train_status.API_VERSION == C.API_VERSION
    assert train_status.FIELD_MANAGER == C.TRAINING_FIELD_MANAGER
    env = {e["name"]: e.get("value") for e in trainingjob.env({"model": "mlp", "dataset": "d", "numWorkers": 1,
                                                                  "gpusPerWorker": 0,
                                                                  "networking": {"backend": "gloo"}}, "j", "ns")}
    assert env["TORCHDEV_API_VERSION"] == C.API_VERSION
    assert env["TORCHDEV_FIELD_MANAGER"] == C.TRAINING_FIELD_MANAGER


def test_the_training_library_writes_to_the_api_version_it_is_given(monkeypatch):
    monkeypatch.setenv("TORCHDEV_API_VERSION", "torchdev.io/v9")
    assert train_status.StatusWriter("j", "ns", server="http://x").api_version == "torchdev.io/v9"
    monkeypatch.delenv("TORCHDEV_API_VERSION")
    assert train_status.StatusWriter("j", "ns", server="http://x").api_version == C.API_VERSION


def test_the_inference_runner_agrees_with_the_constants():
    """torchdev_infer runs in the inference pod without the collection: its exit codes name the
    Failed reasons of constants.EAJ_EXIT_REASONS, its models and paths are the constants'."""
    from torchdev_infer import runner

    assert {code: reason for reason, code in runner.EXIT_CODES.items()} == C.EAJ_EXIT_REASONS
    assert set(C.EAJ_EXIT_REASONS.values()) <= set(C.EAJ_REASONS["Failed"])
    assert runner.BUILTIN_MODELS == C.EAJ_MODELS and runner.MODEL_SUFFIXES == C.EAJ_MODEL_SUFFIXES
    assert runner.MOUNT == C.EAJ_ARTIFACTS_DIR
