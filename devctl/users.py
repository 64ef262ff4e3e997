"""DevUsers as the commands name and find them: a valid user name (the namespace is dev-<user>),
my DevUser found by name, e-mail or namespace, and the LocalQueue its namespace gets."""
from __future__ import annotations

import re
from typing import Iterable

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import LOCAL_QUEUE, NAMESPACE_PREFIX

from .errors import ApiError, NotFound
from .settings import EMAIL_RE, user_from_owner

USER_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
USER_MAX = 59

# the LocalQueue the DevUser role creates in the namespace dev-<user>
DEFAULT_QUEUE = LOCAL_QUEUE


def email_like(text: str | None) -> bool:
    return bool(text and EMAIL_RE.match(text))


def validate_user(_ctx, _param, value: str) -> str:
    if not USER_RE.match(value) or len(value) > USER_MAX:
        raise click.BadParameter(
            f"{value!r} is not a valid username: use lower-case letters, digits and '-', start and "
            f"end with a letter or digit, at most {USER_MAX} characters (the namespace is dev-<user>)")
    return value


def find_devuser(api, *, name: str | None = None, emails: Iterable[str | None] = (),
                 namespace: str | None = None) -> tuple[dict | None, str | None]:
    """My DevUser and how it was found: by ``name`` (must exist), else by e-mail, by the
    namespace (``dev-<user>`` or ``status.namespace``), or by the e-mail's local part.
    Users who may not list DevUsers (cluster-scoped) fall back to reading them by name;
    ``(None, "forbidden")`` when they may not read them either."""
    if name:
        return api.get_devuser(name), "name"
    emails = {e.lower() for e in emails if email_like(e)}
    ns_user = namespace[len(NAMESPACE_PREFIX):] if namespace and namespace.startswith(NAMESPACE_PREFIX) else None
    forbidden = False
    try:
        items = api.list_devusers()
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        items, forbidden = None, exc.status == 403
    if items is not None:
        for obj in items:
            if str((obj.get("spec") or {}).get("email", "")).lower() in emails:
                return obj, "email"
        for obj in items:
            ns_of = (obj.get("status") or {}).get("namespace")
            if (namespace and ns_of == namespace) or obj["metadata"]["name"] == ns_user:
                return obj, "namespace"
        return None, None
    candidates = [(ns_user, "namespace")] + [(user_from_owner(e), "email") for e in sorted(emails)]
    for candidate, how in candidates:
        if not candidate:
            continue
        try:
            return api.get_devuser(candidate), how
        except NotFound:
            forbidden = False
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
    return None, "forbidden" if forbidden else None
