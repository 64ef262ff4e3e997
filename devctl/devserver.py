"""``devctl create | reserve | list | get | delete``: DevServer objects (torchdev.io/v1alpha1)."""
from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone
from typing import Any, Iterable

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import DEVSERVER_LABEL
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import format_duration, parse_duration
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity
from ansible_collections.torchdev.operator.plugins.module_utils.startup import describe as describe_startup

from . import API_VERSION, GROUP
from . import complete
from . import wait as waiting
from .context import kube_options, pass_settings
from .errors import ApiError, DevctlError, NotFound, left_in_place
from .keys import default_ssh_key_files, key_options, read_ssh_keys
from .output import (DURATION, LIST_FORMATS, age, human_size, info, output_option, parse_time, print_object,
                     print_objects, print_table, selector_option, truncate, warn)
from .output import stdin_is_tty as _stdin_is_tty  # patched by the tests
from .servers import (MAX_IDLE_TIMEOUT, desired_replicas, eta_column, for_each, gpu_count, phase_of,
                      ready_column, targets, targets_arguments)
from .settings import EMAIL_RE, Settings
from .ssh_hosts import forget

KIND = "DevServer"
RESOURCE = f"devserver.{GROUP}"
# A DNS-1035 label (the SSH Service is named <name>-ssh). StatefulSet pods carry a
# controller-revision-hash label "<name>-<hash>", so the name must stay <= 52.
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 52
ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
EVENTS_SHOWN = 10


# -- helpers -------------------------------------------------------------------------

def validate_name(_ctx, _param, value: str) -> str:
    if not NAME_RE.match(value) or len(value) > NAME_MAX:
        raise click.BadParameter(
            f"{value!r} is not a valid devserver name: use lower-case letters, digits and '-', "
            f"start with a letter, end with a letter or digit, at most {NAME_MAX} characters")
    return value


def parse_env(values: Iterable[str]) -> list[dict]:
    env: list[dict] = []
    seen: dict[str, int] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME_RE.match(name):
            raise click.BadParameter(f"{item!r} must look like NAME=VALUE", param_hint="'--env'")
        if name in seen:  # last one wins, like docker run -e
            env[seen[name]]["value"] = value
            continue
        seen[name] = len(env)
        env.append({"name": name, "value": value})
    return env


def build_devserver(
    name: str,
    namespace: str,
    *,
    owner: str,
    flavor: str,
    image: str | None = None,
    home_size: str | None = None,
    shared_claim: str | None = None,
    no_shared: bool = False,
    no_user_keys: bool = False,
    ssh_keys: list[str] | None = None,
    ssh_key_secret: dict | None = None,
    env: list[dict] | None = None,
    idle_timeout: int | None = None,
    auto_shutdown: bool | None = None,
    distributed: bool = False,
    replicas: int | None = None,
    nprocs_per_node: int | None = None,
    backend: str | None = None,
    duration: str | None = None,
    ssh_service_type: str | None = None,
) -> dict:
    """The DevServer object ``devctl create`` submits. Unset options are left to
    the CRD defaults (image, home size, idle timeout...)."""
    spec: dict[str, Any] = {"owner": owner, "flavor": flavor}
    if image:
        spec["image"] = image
    if distributed:
        per_node = nprocs_per_node or 1
        spec["mode"] = "distributed"
        spec["distributed"] = {
            "worldSize": int(replicas or 1) * per_node,
            "nprocsPerNode": per_node,
            "backend": backend or "nccl",
        }
    else:
        spec["mode"] = "standalone"
    if home_size:
        spec["persistentHomeSize"] = home_size
    if shared_claim:
        spec["sharedVolumeClaimName"] = shared_claim
    if no_shared:
        spec["mountSharedVolume"] = False
    if no_user_keys:
        spec["mountUserSSHKeys"] = False
    if ssh_keys:
        spec["sshPublicKeys"] = list(ssh_keys)
    if ssh_key_secret:
        spec["sshKeySecretRef"] = dict(ssh_key_secret)
    if ssh_service_type:
        spec["ssh"] = {"serviceType": ssh_service_type}
    if env:
        spec["env"] = list(env)
    lifecycle: dict[str, Any] = {}
    if idle_timeout is not None:
        lifecycle["idleTimeout"] = int(idle_timeout)
    if auto_shutdown is not None:
        lifecycle["autoShutdown"] = bool(auto_shutdown)
    if duration:
        lifecycle["duration"] = duration
    if lifecycle:
        spec["lifecycle"] = lifecycle
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def home_pvcs(api, namespace: str, name: str) -> list[dict]:
    """Home volumes of a DevServer: labelled torchdev.io/devserver=<name> or named home-<name>-<i>."""
    pattern = re.compile(rf"^home-{re.escape(name)}-\d+$")
    found = []
    for pvc in api.list_pvcs(namespace):
        meta = pvc.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(DEVSERVER_LABEL) == name or pattern.match(meta.get("name", "")):
            found.append(pvc)
    return sorted(found, key=lambda p: p["metadata"]["name"])


def pvc_size(pvc: dict) -> str:
    capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
    requested = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    return human_size(capacity or requested) if (capacity or requested) else "?"


# -- create ---------------------------------------------------------------------------

@click.command("create")
@click.argument("name", callback=validate_name)
@click.option("--flavor", required=True, shell_complete=complete.flavors,
              help="DevServerFlavor name (see 'devctl flavors').")
@click.option("--image", help="Container image (default: the CRD's, the torchdev DevServer image of this "
              "version: PyTorch CUDA devel with sshd; a custom image needs /usr/sbin/sshd and ssh-keygen).")
@click.option("--home-size", metavar="QUANTITY",
              help="Persistent home volume size, e.g. 200Gi (default 100Gi).")
@click.option("--shared-claim", metavar="PVC",
              help="Existing PVC to mount at /shared (default: your DevUser's shared volume).")
@click.option("--no-shared", is_flag=True, help="Mount nothing at /shared.")
@key_options
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="Environment variable (repeatable).")
@click.option("--ssh-service-type", type=click.Choice(["ClusterIP", "NodePort", "LoadBalancer"]),
              help="How sshd is reached: ClusterIP (in the cluster; devctl ssh port-forwards), NodePort or "
              "LoadBalancer (a direct address: plain ssh, no kubectl). Default: the cluster's.")
@click.option("--idle-timeout", type=DURATION, metavar="DURATION",
              help="Idle time before auto-shutdown: seconds or 30m, 2h, 1d; 0 = never (default 1h).")
@click.option("--auto-shutdown/--no-auto-shutdown", default=None,
              help="Suspend the server after --idle-timeout of inactivity.")
@click.option("--duration", metavar="DURATION",
              help="Reservation: how long the server may run from its first Ready (e.g. 4h, 1h30m); default none.")
@click.option("--owner", metavar="EMAIL", help="Owner e-mail (default: config owner, git user.email).")
@click.option("--distributed", is_flag=True, help="Distributed mode (a StatefulSet of --replicas nodes).")
@click.option("--replicas", type=click.IntRange(1, 1024), help="Nodes (pods) in distributed mode.")
@click.option("--nprocs-per-node", type=click.IntRange(1, 16), help="Processes per node (default 1).")
@click.option("--backend", type=click.Choice(["nccl", "gloo"]),
              help="torch.distributed backend (default nccl, gloo on a flavor without GPUs).")
@click.option("--wait", "wait_", is_flag=True, help="Wait until the server is Ready.")
@click.option("--timeout", type=DURATION, default="10m", show_default=True, help="How long --wait waits.")
@click.option("--dry-run", is_flag=True, help="Print the object instead of creating it (no API calls).")
@output_option()
@kube_options()
@pass_settings
def create(settings: Settings, name: str, flavor: str, image: str | None, home_size: str | None,
           shared_claim: str | None, no_shared: bool, ssh_key_files: tuple[str, ...], env: tuple[str, ...],
           idle_timeout: float | None, auto_shutdown: bool | None, owner: str | None,
           distributed: bool, replicas: int | None, nprocs_per_node: int | None, backend: str | None,
           wait_: bool, timeout: float, dry_run: bool, output: str, duration: str | None = None,
           no_user_keys: bool = False, ssh_key_secret: dict | None = None,
           ssh_service_type: str | None = None) -> None:
    """Create a dev server NAME of flavor --flavor.

    \b
    Examples:
      devctl create my-dev --flavor gpu-a10g-1 --wait
      devctl create train --flavor gpu-h100-8 --distributed --replicas 4 --nprocs-per-node 8
    """
    if shared_claim and no_shared:
        raise click.UsageError("--shared-claim and --no-shared exclude each other")
    if (replicas or nprocs_per_node or backend) and not distributed:
        raise click.UsageError("--replicas, --nprocs-per-node and --backend need --distributed")
    if distributed and not replicas:
        raise click.UsageError("--distributed needs --replicas N")
    if distributed and replicas * (nprocs_per_node or 1) > 1024:
        raise click.BadParameter("world size (replicas x nprocs-per-node) must be at most 1024",
                                 param_hint="'--replicas'")
    if home_size and not is_quantity(home_size):
        raise click.BadParameter(f"{home_size!r} is not a size like 100Gi", param_hint="'--home-size'")
    if idle_timeout is not None and not 0 <= idle_timeout <= MAX_IDLE_TIMEOUT:
        raise click.BadParameter(f"must be between 0 and {MAX_IDLE_TIMEOUT} seconds (7d)",
                                 param_hint="'--idle-timeout'")
    if duration:
        try:
            duration = format_duration(parse_duration(duration))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--duration'") from None
    owner = settings.owner(owner)
    if not owner:
        raise click.UsageError("no owner e-mail: pass --owner EMAIL or run 'devctl config set-owner EMAIL'")
    if not EMAIL_RE.match(owner):
        raise click.BadParameter(f"{owner!r} is not an e-mail address", param_hint="'--owner'")
    env_vars = parse_env(env)
    if ssh_key_files:
        keys = read_ssh_keys(ssh_key_files, explicit=True)
    else:
        keys = read_ssh_keys(default_ssh_key_files(), explicit=False)
        # `devctl config set github-user U` keeps U's GitHub keys in the config.
        keys += [k for k in settings.config.get("ssh-public-keys") or [] if k not in keys]
    namespace = settings.namespace(owner_override=owner)
    none_found = "no SSH public key found in ~/.ssh/id_*.pub nor from 'devctl config set github-user'"
    no_key_warning = (None if keys else
                      f"{none_found}: 'devctl ssh' works only with the keys of Secret {ssh_key_secret['name']} "
                      "(pass --ssh-key-file to add one)" if ssh_key_secret else
                      f"{none_found}; 'devctl ssh' needs one: pass --ssh-key-file, or have your DevUser onboarded "
                      "with keys (devctl admin onboard --ssh-key-file)" if no_user_keys else
                      f"{none_found}: 'devctl ssh' works only with the keys your DevUser was onboarded with "
                      "(pass --ssh-key-file to add one)")
    body = build_devserver(
        name, namespace, owner=owner, flavor=flavor, image=image, home_size=home_size,
        shared_claim=shared_claim, no_shared=no_shared, no_user_keys=no_user_keys, ssh_keys=keys,
        ssh_key_secret=ssh_key_secret, env=env_vars,
        idle_timeout=int(idle_timeout) if idle_timeout is not None else None,
        auto_shutdown=auto_shutdown, distributed=distributed, replicas=replicas,
        nprocs_per_node=nprocs_per_node, backend=backend, duration=duration, ssh_service_type=ssh_service_type,
    )
    if dry_run:
        if no_key_warning:
            warn(no_key_warning)
        print_object(body, "json" if output == "json" else "yaml")
        return

    api = settings.api
    try:
        flavor_obj = api.get_flavor(flavor)
    except NotFound:
        raise DevctlError(f'devserverflavor "{flavor}" not found (see \'devctl flavors\')') from None
    except ApiError as exc:
        if exc.status != 403:  # users may not be allowed to read flavors; the operator checks
            raise
        flavor_obj = None
    if distributed and backend is None and flavor_obj is not None:
        if gpu_count(flavor_obj) == 0:  # NCCL needs GPUs: a CPU flavor runs gloo
            body["spec"]["distributed"]["backend"] = "gloo"
            info(f"backend gloo: flavor {flavor} has no GPUs (pass --backend to choose)")
    created = api.create_devserver(namespace, body)
    if output == "table":
        click.echo(f"{RESOURCE}/{name} created in namespace {namespace}")
    else:
        info(f"{RESOURCE}/{name} created in namespace {namespace}")
    if no_key_warning:
        warn(no_key_warning)
    if wait_:
        hint_ns = f" -n {namespace}" if settings.namespace_flag else ""
        rejected = None
        with left_in_place(f"devserver {name} (created)", f"'devctl get {name}{hint_ns}' shows it, "
                                                          f"'devctl delete {name}{hint_ns}' deletes it"):
            try:
                created = waiting.wait_ready(lambda: api.get_devserver(namespace, name),
                                             f"devserver/{name}", timeout,
                                             why=waiting.server_pods_reason(api, namespace, name))
            except waiting.Rejected as exc:
                if exc.reason not in waiting.SPEC_REASONS:
                    raise  # the namespace's problem (a claim, a quota): the server waits for it
                rejected = exc
                api.delete_devserver(namespace, name)  # it never ran; its spec never can
        if rejected is not None:
            raise DevctlError(f"{rejected.format_message()}; devserver {name} was deleted (this spec cannot run: "
                              "change it and create the server again)")
        info(f"devserver/{name} is Ready; connect with: "
             f"{(created.get('status') or {}).get('sshCommand') or f'devctl ssh {name} -n {namespace}'}")
    if output != "table":
        print_object(created, output)


# -- reserve --------------------------------------------------------------------------

def hours_to_duration(hours: float) -> str:
    seconds = int(round(hours * 3600))
    if seconds <= 0:
        raise click.BadParameter("must be more than 0", param_hint="'--hours'")
    return format_duration(seconds)


def pick_flavor(flavors: list[dict], gpus: int, replicas: int) -> dict:
    """The cheapest flavor whose GPUs per pod x replicas is ``gpus`` (price unknown: last)."""
    if gpus % replicas:
        raise click.BadParameter(f"{gpus} GPUs do not split evenly over {replicas} replicas", param_hint="'--gpus'")
    per_pod = gpus // replicas
    fits = [f for f in flavors if gpu_count(f) == per_pod]
    if not fits:
        offered = sorted({gpu_count(f) for f in flavors})
        raise DevctlError(f"no flavor has {per_pod} GPU(s) per pod (flavors offer {offered}; see 'devctl flavors')")

    def price(f: dict) -> float:
        try:
            return float((f.get("spec") or {}).get("pricePerHour"))
        except (TypeError, ValueError):
            return float("inf")
    return sorted(fits, key=lambda f: (price(f), f["metadata"]["name"]))[0]


@click.command("reserve")
@click.option("--gpus", type=click.IntRange(0, 1024), required=True, help="GPUs in all.")
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), required=True, help="Reservation length.")
@click.option("--flavor", shell_complete=complete.flavors, help="DevServerFlavor (default: the cheapest that fits --gpus).")
@click.option("--distributed", is_flag=True, help="Distributed mode over --replicas pods.")
@click.option("--replicas", type=click.IntRange(1, 1024), help="Pods in distributed mode.")
@click.option("--name", help="Server name (default: gpu<N>-<random>).")
@click.option("--owner", metavar="EMAIL", help="Owner e-mail (default: config owner, git user.email).")
@key_options
@click.option("--wait", "wait_", is_flag=True, help="Wait until Ready: queue position and ETA, then the SSH command.")
@click.option("--timeout", type=DURATION, default="2h", show_default=True, help="How long --wait waits.")
@output_option()
@kube_options()
@click.pass_context
def reserve(ctx: click.Context, gpus: int, hours: float, flavor: str | None, distributed: bool, replicas: int | None,
            name: str | None, owner: str | None, ssh_key_files: tuple[str, ...], ssh_key_secret: dict | None,
            no_user_keys: bool, wait_: bool, timeout: float, output: str) -> None:
    """Reserve GPUs for --hours: a dev server with that reservation (spec.lifecycle.duration).

    \b
    Examples:
      devctl reserve --gpus 1 --hours 4 --wait
      devctl reserve --gpus 16 --hours 8 --distributed --replicas 2
    """
    settings = ctx.ensure_object(Settings)
    if replicas and not distributed:
        raise click.UsageError("--replicas needs --distributed")
    replicas = replicas or 1
    duration = hours_to_duration(hours)
    if not flavor:
        chosen = pick_flavor(settings.api.list_flavors(), gpus, replicas)
        flavor = chosen["metadata"]["name"]
        info(f"flavor {flavor} (the cheapest with {gpus // replicas} GPU(s) per pod)")
    name = name or f"gpu{gpus}-{secrets.token_hex(3)}"
    nprocs = max(1, gpus // replicas) if distributed else None
    ctx.invoke(create, name=name, flavor=flavor, image=None, home_size=None, shared_claim=None, no_shared=False,
               ssh_key_files=ssh_key_files, ssh_key_secret=ssh_key_secret, no_user_keys=no_user_keys, env=(),
               idle_timeout=None, auto_shutdown=None, owner=owner,
               distributed=distributed, replicas=replicas if distributed else None, nprocs_per_node=nprocs,
               backend=None, wait_=wait_, timeout=timeout, dry_run=False, output=output, duration=duration)


# -- time left ------------------------------------------------------------------------

def _left(when: str | None, now: datetime) -> int | None:
    if not when:
        return None
    try:
        return int((parse_time(when) - now).total_seconds())
    except (TypeError, ValueError):
        return None


def time_left(obj: dict, now: datetime | None = None) -> str:
    """The TIME-LEFT column: until the reservation expires, or "idle 12m" until an idle
    shutdown when that comes first, "ETA in 25m" while queued; "-" when nothing is due."""
    now = now or datetime.now(timezone.utc)
    status = obj.get("status") or {}
    res = status.get("reservation") or {}
    idle = status.get("idle") or {}
    expires = None if res.get("endedAt") else _left(res.get("expiresAt"), now)
    idle_left = _left(idle.get("deadline"), now) if idle.get("autoShutdown") else None
    if idle_left is not None and (expires is None or idle_left < expires):
        return "idle " + format_duration(idle_left)
    if expires is not None:
        return format_duration(expires)
    if status.get("phase") == "Queued":
        return "ETA " + eta_column((status.get("queue") or {}).get("estimatedStartTime"))
    return "-"


def lifecycle_lines(obj: dict, now: datetime | None = None) -> list[tuple[str, str]]:
    """``devctl get``'s reservation and idle lines, with the countdowns."""
    now = now or datetime.now(timezone.utc)
    status = obj.get("status") or {}
    res = status.get("reservation") or {}
    idle = status.get("idle") or {}
    lines = []
    if res.get("endedAt"):
        lines.append(("Reservation", f"ended {res['endedAt']} ({res.get('endReason', '')}), "
                                     f"started {res.get('startedAt', '?')}"))
    elif res.get("expiresAt"):
        left = _left(res["expiresAt"], now)
        extended = int(res.get("extensions") or 0)
        lines.append(("Reservation", f"{res.get('duration', '')} from {res.get('startedAt', '?')}, expires at "
                                     f"{res['expiresAt']} (in {format_duration(left or 0)})"
                                     + (f", extended {extended}x" if extended else "")))
    elif res.get("startedAt"):
        lines.append(("Reservation", f"started {res['startedAt']}, no time limit"))
    if idle.get("since"):
        left = _left(idle.get("deadline"), now)
        what = "stops" if idle.get("autoShutdown") else "idle timeout ends"
        lines.append(("Idle", f"since {idle['since']}; {what} at {idle.get('deadline')} "
                              f"(in {format_duration(left or 0)})"))
    return lines


# -- list -----------------------------------------------------------------------------

@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="List dev servers in every namespace.")
@selector_option("dev servers")
@output_option(formats=LIST_FORMATS)
@kube_options()
@pass_settings
def list_(settings: Settings, all_namespaces: bool, selector: str | None, output: str) -> None:
    """List dev servers (-o wide adds the image, replicas, owner and SSH command)."""
    namespace = None if all_namespaces else settings.namespace()
    items = settings.api.list_devservers(namespace, selector)
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    if print_objects(items, output, RESOURCE):
        return
    wide = output == "wide"
    headers = ["NAME", "FLAVOR", "MODE", "PHASE", "READY", "TIME-LEFT", "AGE"]
    headers = (["NAMESPACE"] if all_namespaces else []) + headers + (
        ["IMAGE", "REPLICAS", "OWNER", "SSH"] if wide else [])
    rows = []
    for obj in items:
        spec = obj.get("spec") or {}
        row = [obj["metadata"]["name"], spec.get("flavor", ""), spec.get("mode") or "standalone",
               phase_of(obj), ready_column(obj), time_left(obj), age(obj["metadata"].get("creationTimestamp"))]
        if all_namespaces:
            row.insert(0, obj["metadata"].get("namespace", ""))
        if wide:
            row += [spec.get("image") or "-", str(desired_replicas(obj)), spec.get("owner") or "-",
                    ((obj.get("status") or {}).get("ssh") or {}).get("command")
                    or (obj.get("status") or {}).get("sshCommand") or "-"]
        rows.append(row)
    where = "any namespace" if all_namespaces else f'namespace "{namespace}"'
    matching = f" matching {selector}" if selector else ""
    print_table(headers, rows, empty=f"No devservers{matching} found in {where}.")


# -- get ------------------------------------------------------------------------------

def _event_time(ev: dict):
    for key in ("lastTimestamp", "eventTime", "deprecatedLastTimestamp", "firstTimestamp"):
        t = parse_time(ev.get(key))
        if t:
            return t
    t = parse_time(((ev.get("series") or {}).get("lastObservedTime")))
    return t or parse_time((ev.get("metadata") or {}).get("creationTimestamp"))


def normalize_event(ev: dict) -> dict:
    """core/v1 and events.k8s.io/v1 events in one shape."""
    obj = ev.get("involvedObject") or ev.get("regarding") or {}
    series_t = parse_time(((ev.get("series") or {}).get("lastObservedTime")))
    when = series_t or _event_time(ev)
    return {
        "uid": (ev.get("metadata") or {}).get("uid"),
        "time": when,
        "type": ev.get("type") or "",
        "reason": ev.get("reason") or "",
        "object": f"{(obj.get('kind') or '').lower()}/{obj.get('name', '')}",
        "message": ev.get("message") or ev.get("note") or "",
        "count": ev.get("count") or ev.get("deprecatedCount") or (ev.get("series") or {}).get("count") or 1,
    }


def recent_events(api, namespace: str, names: Iterable[str], limit: int = EVENTS_SHOWN) -> list[dict]:
    """Events about the given object names (core/v1 and events.k8s.io/v1), oldest first."""
    seen: set = set()
    events: list[dict] = []
    for name in names:
        for lister in (api.list_core_events, api.list_events_v1):
            try:
                raw = lister(namespace, name)
            except ApiError:
                continue  # events are a help, never a reason to fail `get`
            for ev in raw:
                norm = normalize_event(ev)
                key = norm["uid"] or (norm["reason"], norm["object"], norm["message"], norm["time"])
                if key in seen:
                    continue
                seen.add(key)
                events.append(norm)
    floor = datetime.min.replace(tzinfo=timezone.utc)
    events.sort(key=lambda e: e["time"] or floor)
    return events[-limit:]


def _pod_row(pod: dict) -> list[str]:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(statuses) or len(((pod.get("spec") or {}).get("containers")) or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    state = status.get("phase") or "Pending"
    for c in statuses:
        waiting_state = (c.get("state") or {}).get("waiting") or {}
        if waiting_state.get("reason"):
            state = waiting_state["reason"]
    if meta.get("deletionTimestamp"):
        state = "Terminating"
    return [meta.get("name", ""), f"{ready}/{total}", state, str(restarts),
            (pod.get("spec") or {}).get("nodeName") or "<none>", status.get("podIP") or "<none>",
            age(meta.get("creationTimestamp"))]


def describe(obj: dict, pods: list[dict] | None, events: list[dict] | None) -> str:
    """The table-mode view of ``devctl get``: a kubectl-describe-like summary."""
    from .output import format_table

    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name, ns = meta.get("name", ""), meta.get("namespace", "")
    lines: list[tuple[str, Any]] = [
        ("Name", name), ("Namespace", ns), ("Owner", spec.get("owner", "")),
        ("Flavor", spec.get("flavor", "")), ("Mode", spec.get("mode") or "standalone"),
    ]
    if spec.get("mode") == "distributed":
        d = spec.get("distributed") or {}
        lines.append(("Distributed", f"worldSize {d.get('worldSize')}, nprocsPerNode "
                                     f"{d.get('nprocsPerNode', 1)}, backend {d.get('backend', 'nccl')}"))
    lines += [
        ("Image", spec.get("image") or "<default>"),
        ("Home", f"{spec.get('persistentHomeSize', '100Gi')} ({spec.get('homeStorageClassName', 'gp3')}, "
                 f"{spec.get('homeRetentionPolicy', 'Retain')})"),
    ]
    shared = status.get("sharedVolumeClaimName") or spec.get("sharedVolumeClaimName")
    if shared:
        lines.append(("Shared", f"{shared} at /shared"))
    elif spec.get("mountSharedVolume") is False:
        lines.append(("Shared", "none (mountSharedVolume false)"))
    if spec.get("enableSSH", True):
        keys = [f"{len(spec.get('sshPublicKeys') or [])} in the spec"]
        if (spec.get("sshKeySecretRef") or {}).get("name"):
            keys.append(f"Secret {spec['sshKeySecretRef']['name']}")
        elif spec.get("mountUserSSHKeys") is False:
            keys.append("not your DevUser's (mountUserSSHKeys false)")
        else:
            keys.append("your DevUser's, if the namespace has one")
        lines.append(("SSH keys", ", ".join(keys)))
    lc = spec.get("lifecycle") or {}
    if lc:
        lines.append(("Lifecycle", (f"duration {lc['duration']}, " if lc.get("duration") else "")
                      + f"idleTimeout {lc.get('idleTimeout', 3600)}s, "
                        f"autoShutdown {str(lc.get('autoShutdown', False)).lower()}"
                      + (f", keepAliveUntil {lc['keepAliveUntil']}" if lc.get("keepAliveUntil") else "")))
    if spec.get("suspend"):
        lines.append(("Suspend", "true"))
    lines.append(("Created", f"{meta.get('creationTimestamp', '')} ({age(meta.get('creationTimestamp'))} ago)"))
    lines.append(("Phase", phase_of(obj)))
    lines.append(("Replicas", f"{ready_column(obj)} ready"))
    if status.get("startup"):
        lines.append(("Time to Ready", describe_startup(status["startup"])))
    lines += lifecycle_lines(obj)
    if spec.get("enableSSH", True) is False:
        lines.append(("SSH", "disabled"))
    else:
        lines.append(("SSH endpoint", status.get("sshEndpoint") or "<pending>"))
        lines.append(("Connect", status.get("sshCommand") or f"devctl ssh {name} -n {ns}"))
        direct = status.get("ssh") if isinstance(status.get("ssh"), dict) else {}
        wanted = (spec.get("ssh") or {}).get("serviceType") if isinstance(spec.get("ssh"), dict) else None
        if direct.get("command"):
            # the plain command, no devctl or kubectl needed (spec.ssh.serviceType NodePort / LoadBalancer)
            lines.append(("SSH direct", f"{direct['command']} ({direct.get('serviceType')})"))
        elif direct or wanted in ("NodePort", "LoadBalancer"):
            lines.append(("SSH direct", f"<pending: {direct.get('message') or 'not reconciled yet'}>"))
    width = max(len(k) for k, _ in lines) + 2
    out = [f"{k + ':':<{width}}{v}" for k, v in lines]

    if status.get("warnings"):
        out.append("")
        out.append("Warnings:")
        out += [f"  {w}" for w in status["warnings"]]

    conds = status.get("conditions") or []
    out.append("")
    out.append("Conditions:")
    if conds:
        rows = [[c.get("type", ""), c.get("status", ""), c.get("reason", ""),
                 truncate(c.get("message", ""), 80), age(c.get("lastTransitionTime"))] for c in conds]
        out += ["  " + line for line in
                format_table(["TYPE", "STATUS", "REASON", "MESSAGE", "AGE"], rows).splitlines()]
    else:
        out.append("  <none>")

    if pods is not None:
        out.append("")
        out.append("Pods:")
        if pods:
            rows = [_pod_row(p) for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
            out += ["  " + line for line in format_table(
                ["NAME", "READY", "STATUS", "RESTARTS", "NODE", "IP", "AGE"], rows).splitlines()]
        else:
            out.append("  <none>")

    if events is not None:
        out.append("")
        out.append("Events:")
        if events:
            rows = [[age(e["time"]) if e["time"] else "<unknown>", e["type"], e["reason"], e["object"],
                     truncate(e["message"], 100)] for e in events]
            out += ["  " + line for line in format_table(
                ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows).splitlines()]
        else:
            out.append("  <none>")
    return "\n".join(out)


@click.command("get")
@targets_arguments
@output_option(formats=LIST_FORMATS)
@kube_options()
@pass_settings
def get(settings: Settings, names: tuple[str, ...], selector: str | None, output: str) -> None:
    """Show dev servers (NAME... or -l SELECTOR): spec, status, conditions, pods and recent events;
    -o json|yaml prints the object (a List for several or -l), -o name their names."""
    namespace = settings.namespace()
    api = settings.api
    wanted = targets(settings, names, selector)
    if output in ("name", "json", "yaml"):
        def emit(objs: list[dict]) -> None:
            if len(names) == 1 and output != "name":
                print_object(objs[0], output)  # one name: the object itself, as kubectl prints it
            else:
                print_objects(objs, output, RESOURCE)

        for_each_printed(wanted, lambda name: api.get_devserver(namespace, name), emit, always=bool(selector))
        return

    def show(name: str) -> None:
        obj = api.get_devserver(namespace, name)
        try:
            pods = api.list_pods(namespace, f"{DEVSERVER_LABEL}={name}")
        except ApiError:
            pods = None
        events = [name] + [p["metadata"]["name"] for p in (pods or [])][:8]
        if shown:
            click.echo("")
        click.echo(describe(obj, pods, recent_events(api, namespace, events)))
        shown.append(name)

    shown: list[str] = []
    for_each(wanted, show)


def for_each_printed(names: list[str], fetch, emit, always: bool = False) -> None:
    """Fetch each name, print the ones found together (``emit``; an empty list too when
    ``always``), then the missing ones' error."""
    found: list[dict] = []
    try:
        for_each(names, lambda name: found.append(fetch(name)))
    finally:
        if found or always:
            emit(found)


# -- delete ---------------------------------------------------------------------------

@click.command("delete")
@targets_arguments
@click.option("--purge", is_flag=True, help="Also delete the home volume(s); their data is lost.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation (needed for --purge without a terminal).")
@click.option("--wait", "wait_", is_flag=True, help="Wait until the objects are gone.")
@click.option("--timeout", type=DURATION, default="5m", show_default=True, help="How long --wait waits.")
@kube_options()
@pass_settings
def delete(settings: Settings, names: tuple[str, ...], selector: str | None, purge: bool, yes: bool,
           wait_: bool, timeout: float) -> None:
    """Delete dev servers (NAME... or -l SELECTOR). Home volumes are kept unless --purge."""
    gone: dict[str, Any] = {}
    for_each(targets(settings, names, selector), lambda name: _delete_one(settings, name, purge, yes, gone))
    if wait_ and gone:
        waiting.wait_gone(gone, timeout)


def _delete_one(settings: Settings, name: str, purge: bool, yes: bool, gone: dict[str, Any]) -> None:
    """Delete one dev server (and with ``purge`` its home volumes); what to wait for goes to ``gone``."""
    namespace = settings.namespace()
    api = settings.api
    try:
        obj = api.get_devserver(namespace, name)
    except NotFound:
        obj = None
    try:
        pvcs = home_pvcs(api, namespace, name)
    except ApiError as exc:
        if purge:
            raise
        warn(f"cannot list home volumes: {exc.format_message()}")
        pvcs = []
    if obj is None and not (purge and pvcs):
        raise NotFound("devserver", name, namespace)

    if purge and pvcs and not yes:
        listing = ", ".join(f"{p['metadata']['name']} ({pvc_size(p)})" for p in pvcs)
        if not _stdin_is_tty():
            raise DevctlError(f"refusing to delete home volume(s) {listing} without confirmation: "
                              "stdin is not a terminal; pass --yes to confirm")
        click.confirm(f"Delete devserver {name} and home volume(s) {listing} in namespace {namespace}? "
                      "The data on them is lost", abort=True, err=True)

    if obj is not None:
        api.delete_devserver(namespace, name)
        click.echo(f'{RESOURCE} "{name}" deleted from namespace {namespace}')
        gone[f"devserver/{name}"] = lambda: api.get_devserver(namespace, name)
        forget([name], namespace)  # its `devctl ssh-config` entries, if any
    else:
        info(f'devserver "{name}" is already gone; deleting its home volumes')

    retention = ((obj or {}).get("spec") or {}).get("homeRetentionPolicy", "Retain")
    hint_ns = f" -n {namespace}" if settings.namespace_flag else ""
    for i, pvc in enumerate(pvcs):
        pvc_name = pvc["metadata"]["name"]
        if purge:
            left = ", ".join(p["metadata"]["name"] for p in pvcs[i:])
            with left_in_place(f"home volume(s) {left}",
                               f"{'devserver ' + name + ' is deleted; ' if obj is not None else ''}"
                               f"'devctl delete {name}{hint_ns} --purge' deletes them"):
                try:
                    api.delete_pvc(namespace, pvc_name)
                except NotFound:
                    continue
            click.echo(f'persistentvolumeclaim "{pvc_name}" ({pvc_size(pvc)}) deleted')
            gone[f"persistentvolumeclaim/{pvc_name}"] = (
                lambda n=pvc_name: api.get_pvc(namespace, n))
        elif retention == "Delete":
            click.echo(f"home volume {pvc_name} ({pvc_size(pvc)}) is deleted with the server "
                       "(homeRetentionPolicy: Delete)")
        else:
            click.echo(f"kept home volume {pvc_name} ({pvc_size(pvc)}); "
                       f"delete it with devctl delete {name}{hint_ns} --purge")


COMMANDS = (create, reserve, list_, get, delete)
