"""The dependent kinds of a watch, read from its role's templates.

ansible-operator learns a watch's dependent kinds at run time, through its API proxy
(internal/ansible/proxy): a create (POST) made by the role gets the owner reference (or, for
a cluster-scoped or other-namespace object, the ``operator-sdk/primary-resource`` annotations)
and its kind is watched (``inject_owner.go``); a GET served from the proxy's cache of an
object that already points back at the primary watches its kind too (``cache_response.go``
``recoverDependentWatches``: how the watches come back after a restart, and how objects
written by server-side apply, a PATCH the owner injection never sees, are learned). Blacklisted
kinds are neither cached nor watched (``addWatchToController``).

This runtime has no proxy, and the roles hide most results behind ``no_log`` (the DevServer's
objects carry SSH keys), so learning from results alone misses kinds. Instead each watch with
``watchDependentResources`` watches, from the start, every kind its role renders: the
top-level ``apiVersion``/``kind`` of each document of ``<role>/templates/**/*.j2`` (literal
values only: a templated apiVersion such as ``{{ torchdev.api_version }}`` is skipped), less
its blacklist and its own kind. That is the set the proxy learns once the role has created or
read each object; here it is there before the first event, so an object changed while the
runtime was down, or an agent's write before any reconcile, is not missed.
"""
from __future__ import annotations

import os
import re
from typing import Iterable

from .watches import GVK, Watch

# A top-level `apiVersion: v1` / `kind: ConfigMap` line with a literal value.
_FIELD = re.compile(r"""^(apiVersion|kind):[ \t]*(['"]?)([A-Za-z0-9][A-Za-z0-9./-]*)\2[ \t]*(?:\#.*)?$""")
_DOC_SEPARATOR = re.compile(r"^---[ \t]*$")


def template_kinds(text: str) -> list[GVK]:
    """The kinds of the documents of one template: for each document (split on ``---``) the
    first top-level literal apiVersion and kind; a document without both gives nothing.
    Never raises."""
    out: list[GVK] = []
    if not isinstance(text, str):
        return out
    found: dict[str, str] = {}

    def flush() -> None:
        if "apiVersion" in found and "kind" in found:
            gvk = GVK.from_api_version(found["apiVersion"], found["kind"])
            if gvk not in out:
                out.append(gvk)
        found.clear()

    for line in text.splitlines():
        if _DOC_SEPARATOR.match(line):
            flush()
            continue
        m = _FIELD.match(line)
        if m and m.group(1) not in found:
            found[m.group(1)] = m.group(3)
    flush()
    return out


def role_kinds(role_dir: str) -> list[GVK]:
    """Every kind the templates of a role render (sorted by apiVersion and kind); [] for a
    role without templates or a path that is not a directory."""
    kinds: set[GVK] = set()
    tdir = os.path.join(role_dir or "", "templates")
    if not role_dir or not os.path.isdir(tdir):
        return []
    for base, _dirs, files in os.walk(tdir):
        for name in files:
            if not name.endswith(".j2"):
                continue
            try:
                with open(os.path.join(base, name), encoding="utf-8") as fh:
                    kinds.update(template_kinds(fh.read()))
            except (OSError, UnicodeDecodeError):
                continue
    return sorted(kinds, key=lambda g: (g.api_version, g.kind))


def watch_dependents(watch: Watch, kinds: Iterable[GVK]) -> list[GVK]:
    """The kinds a watch watches as dependents, of the kinds its role renders: none without
    watchDependentResources; never its own kind or a blacklisted one."""
    if not watch.watch_dependent_resources:
        return []
    return [g for g in kinds if g != watch.gvk and g not in watch.blacklist]


def derived_dependents(watches: Iterable[Watch]) -> dict[GVK, list[GVK]]:
    """{watched kind: its dependent kinds} from the roles' templates (watches with a role)."""
    out: dict[GVK, list[GVK]] = {}
    for w in watches:
        if w.playbook or not w.role:
            continue
        deps = watch_dependents(w, role_kinds(w.role))
        if deps:
            out[w.gvk] = deps
    return out
