"""The shell completion of names (the ``shell_complete`` of the commands' arguments and options;
``devctl completion`` in completion.py prints the script).

The shell asks ``devctl`` itself, with ``_DEVCTL_COMPLETE`` set, for the words that fit; the
names of servers, flavors, jobs and users come from the cluster of the command line being
completed (its --kubeconfig, --context and -n), with a short timeout: a cluster that does not
answer in time, or any error, completes nothing and prints nothing.
"""
from __future__ import annotations

from typing import Callable

import click

COMPLETE_VAR = "_DEVCTL_COMPLETE"
# Seconds a completion may wait for the API (connect, read): a shell must not hang.
TIMEOUT = (1.5, 2.0)


def _settings(ctx: click.Context):
    """The Settings of the command line being completed: the root's options, then those given
    after the subcommand (kube_options' callbacks set them on the context's Settings)."""
    from .settings import Settings

    root = ctx.find_root()
    settings = Settings(kubeconfig=root.params.get("kubeconfig"), context=root.params.get("kube_context"),
                        namespace_flag=root.params.get("namespace"))
    given = ctx.find_object(Settings)
    if given is not None:
        settings.kubeconfig = given.kubeconfig or settings.kubeconfig
        settings.context = given.context or settings.context
        settings.namespace_flag = given.namespace_flag or settings.namespace_flag
    return settings


def _names(list_objects: Callable, namespaced: bool = True) -> Callable:
    """A click ``shell_complete`` for names: ``list_objects(api, namespace)`` -> objects."""

    def complete(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        try:
            settings = _settings(ctx)
            api = settings.api
            api.request_timeout = TIMEOUT
            objects = list_objects(api, settings.namespace() if namespaced else None)
            names = sorted({str(((o or {}).get("metadata") or {}).get("name") or "") for o in objects})
        except Exception:  # noqa: BLE001 - completion prints nothing, whatever went wrong
            return []
        return [CompletionItem(name) for name in names if name and name.startswith(incomplete)]

    return complete


servers = _names(lambda api, ns: api.list_devservers(ns))
flavors = _names(lambda api, _ns: api.list_flavors(), namespaced=False)
training_jobs = _names(lambda api, ns: api.list_trainingjobs(ns))
inference_jobs = _names(lambda api, ns: api.list_eajs(ns))
users = _names(lambda api, _ns: api.list_devusers(), namespaced=False)
