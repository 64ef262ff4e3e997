"""``devctl version``: devctl's version and the operator's, as the cluster says it.

The operator's version is read from its Deployment: ``torchdev-controller-manager`` in
``torchdev-system`` (config/default: ``make deploy``), else any Deployment labelled
``app.kubernetes.io/name=torchdev,control-plane=controller-manager`` (an OLM install, in the
namespace the subscription chose). It is the Deployment's ``app.kubernetes.io/version`` label
when it has one, else the tag of its ``manager`` container's image
(``ghcr.io/torchdev/torchdev-operator:0.1.0`` -> ``0.1.0``). "unknown", with the reason, when
devctl cannot read it (no cluster, no permission to read Deployments there, no operator).
"""
from __future__ import annotations

from .errors import DevctlError, one_line

OPERATOR_NAMESPACE = "torchdev-system"
OPERATOR_DEPLOYMENT = "torchdev-controller-manager"
OPERATOR_SELECTOR = "app.kubernetes.io/name=torchdev,control-plane=controller-manager"
MANAGER_CONTAINER = "manager"
# Seconds the lookup may wait for the API (connect, read): version must answer offline too.
TIMEOUT = (2.0, 3.0)


def image_version(image: str) -> str | None:
    """The tag of an image reference (``repo:tag``, ``repo:tag@sha256:...``); None without one
    (``repo``, ``repo@sha256:...``, ``host:5000/repo``)."""
    name = str(image or "").split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] or None if ":" in last else None


def operator_of(deployment: dict) -> dict:
    """{"version", "image", "deployment"} of the operator's Deployment."""
    meta = deployment.get("metadata") or {}
    containers = ((((deployment.get("spec") or {}).get("template") or {}).get("spec") or {})
                  .get("containers") or [])
    manager = next((c for c in containers if (c or {}).get("name") == MANAGER_CONTAINER),
                   containers[0] if containers else {}) or {}
    image = manager.get("image") or ""
    version = (meta.get("labels") or {}).get("app.kubernetes.io/version") or image_version(image)
    return {"version": version or "unknown", "image": image or None,
            "deployment": f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            **({} if version else {"reason": f"the image {image or '(none)'} has no tag"})}


def operator_version(settings) -> dict:
    """What the cluster says of the operator (operator_of), or {"version": "unknown", "reason"}."""
    from .errors import NotFound

    try:
        api = settings.api
        api.request_timeout = TIMEOUT
        try:
            return operator_of(api.get_deployment(OPERATOR_NAMESPACE, OPERATOR_DEPLOYMENT))
        except (NotFound, DevctlError) as first:
            try:
                found = api.list_deployments(OPERATOR_SELECTOR)
            except DevctlError:
                raise first from None
            if not found:
                raise first from None
            return operator_of(sorted(found, key=lambda d: (d["metadata"].get("namespace", ""),
                                                            d["metadata"].get("name", "")))[0])
    except DevctlError as exc:
        return {"version": "unknown", "reason": one_line(exc.format_message())}
