"""Simulated cluster controllers. Importing this package registers the built-ins."""
from kubesim.controllers.base import REGISTRY, Controller, Manager, register  # noqa: F401

BUILTIN_MODULES = (
    "garbagecollector",
    "namespace",
    "scheduler",
    "kubelet",
    "deployment",
    "statefulset",
    "job",
    "service",
    "pvc",
    "resourcequota",
    "kueue",
    "kueue_job",
)


def load_builtins() -> None:
    import importlib

    for mod in BUILTIN_MODULES:
        try:
            importlib.import_module(f"kubesim.controllers.{mod}")
        except ModuleNotFoundError as exc:  # a controller not written yet
            if exc.name != f"kubesim.controllers.{mod}":
                raise
