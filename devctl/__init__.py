"""devctl: the torchdev command line (GPU dev servers on Kubernetes)."""

__version__ = "0.1.0"

GROUP = "torchdev.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
