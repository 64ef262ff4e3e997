# -*- coding: utf-8 -*-
# Apache-2.0
"""Labels and ownerReferences of the objects the roles render (one shared source).

Key order matters: the roles serialise these maps into the manifests they hash and apply.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    API_VERSION, DEVSERVER_LABEL, FLAVOR_LABEL, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME,
    LABEL_PART_OF, MANAGED_BY, OWNER_LABEL, PART_OF, USER_LABEL)
from ansible_collections.torchdev.operator.plugins.module_utils.plan import checksum

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def owner_label(email):
    """jane.doe@example.com -> jane.doe_at_example.com, a valid label value (<= 63)."""
    value = _LABEL_VALUE_BAD.sub("-", str(email or "").replace("@", "_at_"))
    if len(value) > 63:
        value = value[:54] + "-" + checksum(email, 8)
    return value.strip("-_.")


# --------------------------------------------------------------------------- DevServer
def selector_labels(name):
    """The stable subset used in selectors (immutable in a StatefulSet)."""
    return {
        LABEL_NAME: "devserver",
        LABEL_INSTANCE: str(name),
    }


def stable_labels(name):
    """Labels that never change for a DevServer (volumeClaimTemplates are immutable)."""
    labels = selector_labels(name)
    labels.update({
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        DEVSERVER_LABEL: str(name),
    })
    return labels


def devserver_labels(name, owner, flavor, component="server"):
    """The full recommended label set of every object a DevServer renders."""
    result = stable_labels(name)
    result.update({
        LABEL_COMPONENT: str(component),
        OWNER_LABEL: owner_label(owner),
        FLAVOR_LABEL: str(flavor),
    })
    return result


def usage_labels(server, owner, flavor):
    """The labels of a DevServer's UsageRecord: the DevServer's (``torchdev.io/devserver``,
    ``owner``, ``flavor`` select a server's, a user's, a flavor's records) as a ``usagerecord``."""
    result = devserver_labels(server, owner, flavor, component="usage")
    result[LABEL_NAME] = "usagerecord"
    return result


# --------------------------------------------------------------------------- DevServerFlavor
def flavor_labels(name):
    """The labels of the Kueue ResourceFlavor a DevServerFlavor renders (``torchdev.io/flavor``)."""
    return {
        LABEL_NAME: "devserverflavor",
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        FLAVOR_LABEL: str(name),
    }


# --------------------------------------------------------------------------- DevUser
def devuser_labels(name, email, component):
    """The labels of the objects a DevUser renders (``torchdev.io/user`` selects them)."""
    return {
        LABEL_NAME: "devuser",
        LABEL_INSTANCE: str(name),
        LABEL_COMPONENT: str(component),
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        USER_LABEL: str(name),
        OWNER_LABEL: owner_label(email),
    }


# --------------------------------------------------------------------------- ownership
def owner_reference(obj):
    """A controller ownerReference to the (raw) custom resource ``obj``."""
    meta = (obj or {}).get("metadata") or {}
    if not meta.get("uid") or not meta.get("name"):
        raise ValueError("owner_reference needs an object with metadata.name and metadata.uid")
    return {
        "apiVersion": obj.get("apiVersion") or API_VERSION,
        "kind": obj.get("kind") or "DevServer",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
