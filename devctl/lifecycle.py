"""``devctl stop | start | cancel | extend | keepalive | autostop``: a DevServer's lifecycle
(``devctl reserve`` creates a server with a reservation: devserver.py).

Stopping is a merge patch of the DevServer: ``spec.suspend`` plus the annotations
``torchdev.io/stopped-by`` / ``stopped-at`` that say why (the operator stops expired and idle
servers the same way); starting removes them.  The reservation is
``spec.lifecycle.duration``; the operator keeps ``status.reservation`` (docs/api.md
"Lifecycle").
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    STOPPED_AT_ANNOTATION, STOPPED_BY_ANNOTATION)
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import format_duration, parse_duration

from . import complete
from .settings import Settings
from .context import kube_options, pass_settings
from .servers import MAX_IDLE_TIMEOUT, for_each, targets, targets_arguments
from .errors import DevctlError
from .output import DURATION, DurationType, info, output_option, print_object, print_objects
from . import wait as waiting

MAX_KEEPALIVE_HOURS = 24


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def stop_patch(by: str) -> dict:
    return {"metadata": {"annotations": {STOPPED_BY_ANNOTATION: by, STOPPED_AT_ANNOTATION: _now()}},
            "spec": {"suspend": True}}


START_PATCH = {"metadata": {"annotations": {STOPPED_BY_ANNOTATION: None, STOPPED_AT_ANNOTATION: None}},
               "spec": {"suspend": False}}


def wait_applied(api, namespace: str, name: str, generation: int, timeout: float) -> dict:
    """Poll until the operator has reconciled ``generation`` (status.observedGeneration)."""
    deadline = time.monotonic() + timeout
    while True:
        obj = api.get_devserver(namespace, name)
        if int((obj.get("status") or {}).get("observedGeneration") or 0) >= generation:
            return obj
        if time.monotonic() >= deadline:
            raise DevctlError(f"timed out after {int(timeout)}s waiting for the operator to apply the change "
                              f"to devserver/{name} (is the operator running?)")
        time.sleep(waiting.POLL_INTERVAL)


def rejected(obj: dict, field: str) -> str | None:
    """The Degraded message when the operator rejected a spec naming ``field``."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Degraded" and cond.get("status") == "True" and field in (cond.get("message") or ""):
            return cond.get("message")
    return None


def _result(obj: dict, output: str, text: str) -> None:
    if output == "table":
        click.echo(text)
    else:
        info(text)
        print_object(obj, output)


def _results(objs: list[dict], names: tuple[str, ...], output: str, texts: list[str]) -> None:
    """The lines of a command on one or more servers; -o json|yaml prints the object for one NAME,
    a List otherwise."""
    if output == "table":
        for text in texts:
            click.echo(text)
        return
    for text in texts:
        info(text)
    if len(names) == 1:
        print_object(objs[0], output)
    elif objs or not names:
        print_objects(objs, output, "")


@click.command("stop")
@targets_arguments
@output_option()
@kube_options()
@pass_settings
def stop(settings: Settings, names: tuple[str, ...], selector: str | None, output: str) -> None:
    """Stop dev servers (NAME... or -l SELECTOR): scale to zero, keep their homes; ends their
    reservations. 'devctl start' resumes them."""
    api = settings.api
    namespace = settings.namespace()
    objs: list[dict] = []
    texts: list[str] = []

    def stop_one(name: str) -> None:
        objs.append(api.patch_devserver(namespace, name, stop_patch("user")))
        texts.append(f"devserver/{name} stopped (home kept; 'devctl start {name}' resumes it)")

    wanted = targets(settings, names, selector)
    try:
        for_each(wanted, stop_one)
    finally:
        _results(objs, names, output, texts)


@click.command("start")
@targets_arguments
@click.option("--wait", "wait_", is_flag=True, help="Wait until the servers are Ready (shows the queue position).")
@click.option("--timeout", type=DURATION, default="30m", show_default=True, help="How long --wait waits (each).")
@output_option()
@kube_options()
@pass_settings
def start(settings: Settings, names: tuple[str, ...], selector: str | None, wait_: bool, timeout: float,
          output: str) -> None:
    """Start stopped, expired or cancelled dev servers (NAME... or -l SELECTOR): they queue again
    (with Kueue) and a new reservation of spec.lifecycle.duration starts when each is Ready."""
    api = settings.api
    namespace = settings.namespace()
    started: list[tuple[str, dict]] = []
    wanted = targets(settings, names, selector)
    try:
        for_each(wanted,
                 lambda name: started.append((name, api.patch_devserver(namespace, name, START_PATCH))))
        error = None
    except DevctlError as exc:  # reported after the servers that did start (the ones not found: all of them)
        error = exc
    objs: list[dict] = []
    texts: list[str] = []
    for name, obj in started:
        text = f"devserver/{name} started"
        if wait_:
            info(text)
            obj = waiting.wait_ready(lambda n=name: api.get_devserver(namespace, n), f"devserver/{name}",
                                     timeout, why=waiting.server_pods_reason(api, namespace, name))
            text = (f"devserver/{name} is Ready; connect with: "
                    f"{(obj.get('status') or {}).get('sshCommand') or f'devctl ssh {name}'}")
        objs.append(obj)
        texts.append(text)
    _results(objs, names, output, texts)
    if error is not None:
        raise error


@click.command("cancel")
@click.argument("name", shell_complete=complete.servers)
@output_option()
@kube_options()
@pass_settings
def cancel(settings: Settings, name: str, output: str) -> None:
    """End the reservation of NAME now (recorded as cancelled): the server stops, its home and the
    DevServer are kept, unlike 'devctl delete'."""
    api = settings.api
    namespace = settings.namespace()
    obj = api.patch_devserver(namespace, name, stop_patch("cancelled"))
    _result(obj, output, f"devserver/{name}: reservation cancelled (stopped, home kept)")


@click.command("extend")
@click.argument("name", shell_complete=complete.servers)
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Hours to add to the reservation.")
@click.option("--timeout", type=DURATION, default="60s", show_default=True,
              help="How long to wait for the operator to accept the new duration.")
@output_option()
@kube_options()
@pass_settings
def extend(settings: Settings, name: str, hours: float, timeout: float, output: str) -> None:
    """Add --hours to the reservation of NAME (spec.lifecycle.duration), within the cluster's and your
    DevUser's maximum; the new expiry is printed once the operator has applied it."""
    api = settings.api
    namespace = settings.namespace()
    obj = api.get_devserver(namespace, name)
    lifecycle = (obj.get("spec") or {}).get("lifecycle") or {}
    if not lifecycle.get("duration"):
        raise DevctlError(f"devserver/{name} has no reservation (spec.lifecycle.duration); "
                          f"it runs without a time limit")
    old = lifecycle["duration"]
    new = format_duration(parse_duration(old) + int(round(hours * 3600)))
    patched = api.patch_devserver(namespace, name, {"spec": {"lifecycle": {"duration": new}}})
    applied = wait_applied(api, namespace, name, int(patched["metadata"].get("generation") or 0), timeout)
    why = rejected(applied, "spec.lifecycle.duration")
    if why:
        api.patch_devserver(namespace, name, {"spec": {"lifecycle": {"duration": old}}})
        raise DevctlError(f"cannot extend devserver/{name} to {new}: {why} (kept {old})")
    expires = ((applied.get("status") or {}).get("reservation") or {}).get("expiresAt")
    _result(applied, output, f"devserver/{name}: reservation {old} -> {new}"
                             + (f"; expires at {expires}" if expires else " (starts when the server is Ready)"))


@click.command("keepalive")
@click.argument("name", shell_complete=complete.servers)
@click.option("--hours", type=click.FloatRange(min=0, min_open=True, max=MAX_KEEPALIVE_HOURS), required=True,
              help=f"Postpone an idle shutdown by this many hours (at most {MAX_KEEPALIVE_HOURS}).")
@output_option()
@kube_options()
@pass_settings
def keepalive(settings: Settings, name: str, hours: float, output: str) -> None:
    """Keep NAME running while idle for --hours (spec.lifecycle.keepAliveUntil); the reservation's
    expiry still holds."""
    api = settings.api
    namespace = settings.namespace()
    until = (datetime.now(timezone.utc) + timedelta(hours=hours)).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = api.patch_devserver(namespace, name, {"spec": {"lifecycle": {"keepAliveUntil": until}}})
    _result(obj, output, f"devserver/{name}: no idle shutdown before {until}")


def autostop_text(obj: dict) -> str:
    """What spec.lifecycle says of an idle NAME: "stops after 30m idle" or why it does not."""
    lifecycle = (obj.get("spec") or {}).get("lifecycle") or {}
    name = obj["metadata"]["name"]
    idle = lifecycle.get("idleTimeout", 3600)
    if not idle:
        return f"devserver/{name}: no idle detection (idleTimeout 0), no automatic stop"
    if lifecycle.get("autoShutdown"):
        return f"devserver/{name}: stops after {format_duration(idle)} idle (home kept; 'devctl start' resumes it)"
    return f"devserver/{name}: no automatic stop (idle after {format_duration(idle)} is warned about)"


@click.command("autostop")
@targets_arguments
@click.option("--idle", type=DurationType(minimum=60, maximum=MAX_IDLE_TIMEOUT, whole=True), metavar="DURATION",
              help="Stop the servers once idle this long (spec.lifecycle idleTimeout and autoShutdown; 1m to 7d).")
@click.option("--off", is_flag=True, help="No automatic stop (an idle server is still warned about).")
@output_option()
@kube_options()
@pass_settings
def autostop(settings: Settings, names: tuple[str, ...], selector: str | None, idle: int | None, off: bool,
             output: str) -> None:
    """Change when running or stopped servers (NAME... or -l SELECTOR) stop by themselves when idle:
    --idle 30m, or --off; without either, show the setting. The operator applies it to a running
    server at its next reconcile (the idle deadline moves; no restart)."""
    if idle is not None and off:
        raise click.UsageError("give --idle DURATION or --off, not both")
    api = settings.api
    namespace = settings.namespace()
    lifecycle = {"autoShutdown": False} if off else {"idleTimeout": idle, "autoShutdown": True} if idle else None
    objs: list[dict] = []

    def apply(name: str) -> None:
        objs.append(api.patch_devserver(namespace, name, {"spec": {"lifecycle": lifecycle}}) if lifecycle
                    else api.get_devserver(namespace, name))

    wanted = targets(settings, names, selector)
    try:
        for_each(wanted, apply)
    finally:
        _results(objs, names, output, [autostop_text(obj) for obj in objs])
