"""devctl: the torchdev command line (GPU dev servers on Kubernetes)."""

from pathlib import Path as _Path


def _version() -> str:
    """The one version of torchdev: the VERSION file at the repository root (docs/delivery.md);
    an installed distribution without the checkout answers from its metadata (the same file,
    pyproject.toml reads it)."""
    try:
        return (_Path(__file__).resolve().parent.parent / "VERSION").read_text().strip()
    except OSError:  # a wheel install: the operator's package, or devctl alone (clients/devctl)
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("torchdev")
        except PackageNotFoundError:
            return version("torchdev-devctl")


__version__ = _version()

# The API group and version are the operator's (plugins/module_utils/constants.py): devctl
# shares the collection's module_utils for its names and quantities.
from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP as GROUP, API_VERSION, VERSION  # noqa: E402,F401
