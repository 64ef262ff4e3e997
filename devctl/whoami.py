"""``devctl whoami``: who the cluster says I am, and which DevUser and namespace are mine."""
from __future__ import annotations

from typing import Any

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import USER_LABEL

from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError, DevctlError
from .output import output_option, print_object, warn
from .users import DEFAULT_QUEUE, email_like, find_devuser


def identity(settings: Settings) -> dict[str, Any]:
    """The authenticated user: SelfSubjectReview when served, else the kube context's user."""
    from .api import kubeconfig_context  # lazy

    api = settings.api
    context_name, context = kubeconfig_context(settings.kubeconfig, settings.context)
    try:
        user_info = api.self_subject_review()
    except ApiError as exc:
        if exc.status != 403:
            raise
        user_info = None
    out: dict[str, Any] = {"context": context_name, "server": api.host}
    if user_info and user_info.get("username"):
        out.update(username=user_info["username"], groups=list(user_info.get("groups") or []),
                   source="SelfSubjectReview")
    else:
        out.update(username=context.get("user"), groups=[], source="kubeconfig")
    return out


def from_namespace(api, namespace: str) -> dict[str, Any]:
    """What a user who may not read DevUsers learns from their namespace: the DevUser named by
    its ``torchdev.io/user`` label, and the LocalQueue and its ClusterQueue."""
    out: dict[str, Any] = {"devUser": None, "queue": None, "clusterQueue": None, "kueue": None}
    try:
        labels = (api.get_namespace(namespace).get("metadata") or {}).get("labels") or {}
    except ApiError:
        labels = {}
    if labels.get(USER_LABEL):
        out.update(devUser=labels[USER_LABEL], foundBy="namespace label")
    try:
        lq = api.get_localqueue(namespace, DEFAULT_QUEUE)
    except ApiError as exc:
        if exc.status == 404 and "no resource" in exc.format_message():
            out["kueue"] = False
        return out
    out.update(queue=lq["metadata"]["name"], clusterQueue=(lq.get("spec") or {}).get("clusterQueue"),
               kueue=True)
    return out


def quota_summary(quota: dict) -> str:
    text = (f"{quota.get('gpus', 0)} GPUs, {quota.get('cpu', '64')} CPU, "
            f"{quota.get('memory', '256Gi')} memory per flavor")
    overrides = quota.get("flavors") or []
    if overrides:
        text += "; " + ", ".join(f"{f['name']}: {f.get('gpus', quota.get('gpus', 0))} GPUs"
                                 for f in overrides)
    return (text + f"; storage {quota.get('storage', '2Ti')}, "
            f"{quota.get('devServers', 10)} dev servers")


def whoami_info(settings: Settings) -> dict[str, Any]:
    api = settings.api
    me = identity(settings)
    owner = settings.owner()
    try:
        namespace = settings.namespace()
    except DevctlError:
        namespace = None
    username = me.get("username")
    obj, how = find_devuser(api, emails=[username, owner], namespace=namespace)
    me["owner"] = owner
    # where devctl's namespace comes from (-n, the config, the kubeconfig, the e-mail)
    me["namespaceFrom"] = settings.namespace_origin(namespace) if namespace else None
    if obj is None:
        readable = how != "forbidden"
        me.update(email=next((e for e in (username, owner) if email_like(e)), None),
                  namespace=namespace, devUserReadable=readable, phase=None, quota=None)
        found = from_namespace(api, namespace) if namespace else {
            "devUser": None, "queue": None, "clusterQueue": None, "kueue": None}
        if readable:  # the label of a namespace whose DevUser is gone (offboarded) is no DevUser
            found.update(devUser=None)
            found.pop("foundBy", None)
        me.update(found)
        return me
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    me.update(devUser=obj["metadata"]["name"], foundBy=how, email=spec.get("email"),
              displayName=spec.get("displayName"),
              namespace=status.get("namespace") or f"dev-{obj['metadata']['name']}",
              phase=status.get("phase") or "Pending", queue=status.get("queueName"),
              clusterQueue=status.get("clusterQueue"), kueue=status.get("kueue"),
              quota=spec.get("quota") or {})
    if namespace and namespace != me["namespace"]:
        me["currentNamespace"] = namespace
    return me


@click.command("whoami")
@output_option()
@kube_options()
@pass_settings
def whoami(settings: Settings, output: str) -> None:
    """Show who you are to the cluster, and your DevUser, namespace, queue and quota."""
    me = whoami_info(settings)
    if me["devUser"] is None:
        who = me.get("username") or me.get("owner") or "you"
        if me.get("devUserReadable") is False:
            warn(f"you may not read DevUsers and namespace {me.get('namespace')} is not a torchdev "
                 f"user namespace; pass -n dev-<user>, or ask a cluster admin")
        else:
            warn(f"no DevUser found for {who}; ask a cluster admin to run 'devctl admin onboard'")
    if output != "table":
        print_object(me, output)
        return
    via = "SelfSubjectReview" if me["source"] == "SelfSubjectReview" else "kubeconfig context user"
    lines = [("User", f"{me.get('username') or '<unknown>'} ({via})")]
    if me.get("groups"):
        lines.append(("Groups", ", ".join(me["groups"])))
    lines += [("Context", f"{me.get('context') or '<none>'} ({me['server']})"),
              ("DevUser", me["devUser"] or "<none>")]
    if me["devUser"]:
        lines += [("Email", me.get("email") or ""), ("Phase", me.get("phase") or "")]
    origin = f" ({me['namespaceFrom']})" if me.get("namespaceFrom") and not me.get("currentNamespace") else ""
    lines.append(("Namespace", (me.get("namespace") or "<unknown>") + origin))
    if me.get("currentNamespace"):
        lines.append(("Current namespace", me["currentNamespace"] + (f" ({me['namespaceFrom']})" if me.get("namespaceFrom") else "")))
    queue = me.get("queue")
    if queue and me.get("clusterQueue"):
        queue = f"{queue} (ClusterQueue {me['clusterQueue']})"
    lines.append(("Queue", queue or ("none (no Kueue)" if me.get("kueue") is False else "<none>")))
    if me.get("quota") is not None:
        lines.append(("Quota", quota_summary(me["quota"])))
    width = max(len(k) for k, _ in lines) + 2
    for key, value in lines:
        click.echo(f"{key + ':':<{width}}{value}")
