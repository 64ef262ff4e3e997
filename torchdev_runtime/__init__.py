"""Local Python runtime for the torchdev Ansible operator (stand-in for ansible-operator).

See torchdev_runtime.runtime.Runtime for the Python API and ``torchdev-runtime --help``.
"""
from .runtime import Runtime
from .watches import GVK, Watch, WatchesError, load_watches

__all__ = ["Runtime", "GVK", "Watch", "WatchesError", "load_watches"]
