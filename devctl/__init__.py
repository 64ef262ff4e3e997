"""devctl: the torchdev command line (GPU dev servers on Kubernetes)."""

__version__ = "0.1.0"

# The API group and version are the operator's (plugins/module_utils/constants.py): devctl
# shares the collection's module_utils for its names and quantities.
from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_GROUP as GROUP, API_VERSION, VERSION  # noqa: E402,F401
