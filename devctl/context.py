"""Global options (``--kubeconfig``, ``--context``, ``-n``) accepted both before
and after the subcommand, like kubectl (``devctl ssh x -n dev-alice``)."""
from __future__ import annotations

import click

from .settings import Settings


def _setter(attr: str):
    def callback(ctx: click.Context, _param: click.Parameter, value):
        if value is not None:
            settings = ctx.ensure_object(Settings)
            setattr(settings, attr, value)
        return value

    return callback


def kube_options(namespaced: bool = True):
    """Decorator adding the global connection options to a subcommand."""

    def decorate(fn):
        opts = [
            click.option("--kubeconfig", metavar="PATH", expose_value=False, is_eager=True,
                         callback=_setter("kubeconfig"), help="Path to the kubeconfig file."),
            click.option("--context", metavar="NAME", expose_value=False, is_eager=True,
                         callback=_setter("context"), help="Kubeconfig context to use."),
        ]
        if namespaced:
            opts.append(click.option("-n", "--namespace", metavar="NS", expose_value=False, is_eager=True,
                                     callback=_setter("namespace_flag"),
                                     help="Namespace (default: config, kube context, dev-<user>)."))
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return decorate


pass_settings = click.make_pass_decorator(Settings, ensure=True)
