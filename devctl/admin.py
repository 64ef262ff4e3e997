"""``devctl admin onboard | offboard | users``: DevUser objects (torchdev.io/v1alpha1, cluster-scoped).

``onboard`` is a server-side apply with the field manager ``devctl``: it creates the
DevUser or updates it, and running it again with the same options changes nothing.
Options not given keep the DevUser's current values.
"""
from __future__ import annotations

import ipaddress
from typing import Any, Iterable

import click

from ansible_collections.torchdev.operator.plugins.module_utils.constants import CREATED_BY_ANNOTATION
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity

from . import API_VERSION, GROUP
from . import complete
from .api import FIELD_MANAGER
from . import wait as waiting
from .settings import DNS1123_SUBDOMAIN_RE, EMAIL_RE, Settings
from .context import kube_options, pass_settings
from .keys import read_ssh_keys
from .errors import ApiError, DevctlError, NotFound, left_in_place
from .output import stdin_is_tty as _stdin_is_tty  # patched by the tests
from .users import validate_user
from .output import (DURATION, LIST_FORMATS, age, info, output_option, print_object, print_objects,
                     print_table, selector_option)

KIND = "DevUser"
RESOURCE = f"devuser.{GROUP}"
# metadata.name is the username: a DNS-1123 label of at most 59 characters (dev-<name> <= 63).
MAX_GPUS = 4096
MAX_CIDRS = 16
MAX_FLAVOR_QUOTAS = 64
FLAVOR_RE = DNS1123_SUBDOMAIN_RE


# -- validation -------------------------------------------------------------------------

def _email(_ctx, _param, value: str | None) -> str | None:
    if value is not None and not EMAIL_RE.match(value):
        raise click.BadParameter(f"{value!r} is not an e-mail address (like alice@example.com)")
    return value


def _quantity(_ctx, param, value: str | None) -> str | None:
    if value is not None and not is_quantity(value):
        raise click.BadParameter(f"{value!r} is not a quantity like 64, 500m or 256Gi")
    return value


def _cidrs(_ctx, _param, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        try:
            if "/" not in value:
                raise ValueError
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not a CIDR like 10.0.0.0/8") from None
    if len(values) > MAX_CIDRS:
        raise click.BadParameter(f"at most {MAX_CIDRS} CIDRs, got {len(values)}")
    return values


def parse_flavor_quota(values: Iterable[str]) -> list[dict]:
    """``FLAVOR=GPUS[,cpu=Q][,memory=Q]`` -> ``spec.quota.flavors`` entries (last one per flavor wins)."""
    hint = "'--flavor-quota'"
    entries: dict[str, dict] = {}
    for item in values:
        name, sep, rest = item.partition("=")
        parts = rest.split(",")
        if not sep or not FLAVOR_RE.match(name) or not parts[0].isdigit():
            raise click.BadParameter(f"{item!r} must look like FLAVOR=GPUS[,cpu=Q][,memory=Q]",
                                     param_hint=hint)
        gpus = int(parts[0])
        if gpus > MAX_GPUS:
            raise click.BadParameter(f"{item!r}: at most {MAX_GPUS} GPUs", param_hint=hint)
        entry: dict[str, Any] = {"name": name, "gpus": gpus}
        for extra in parts[1:]:
            key, sep, qty = extra.partition("=")
            if key not in ("cpu", "memory") or not sep or not is_quantity(qty):
                raise click.BadParameter(f"{item!r}: {extra!r} must be cpu=Q or memory=Q "
                                         "(a quantity like 32 or 128Gi)", param_hint=hint)
            entry[key] = qty
        entries[name] = entry
    if len(entries) > MAX_FLAVOR_QUOTAS:
        raise click.BadParameter(f"at most {MAX_FLAVOR_QUOTAS} flavors", param_hint=hint)
    return list(entries.values())


# -- the object ---------------------------------------------------------------------------

def build_devuser(name: str, *, email: str, ssh_keys: list[str] | None = None, gpus: int | None = None,
                  cpu: str | None = None, memory: str | None = None,
                  flavor_quotas: list[dict] | None = None, cluster_queue: str | None = None,
                  priority_class: str | None = None, ssh_cidrs: list[str] | None = None,
                  deletion_policy: str | None = None, adopt_namespace: bool | None = None) -> dict:
    """The DevUser devctl applies: only the fields given (the CRD defaults the rest)."""
    spec: dict[str, Any] = {"email": email}
    if ssh_keys is not None:
        spec["sshPublicKeys"] = list(ssh_keys)
    quota = {k: v for k, v in (("gpus", gpus), ("cpu", cpu), ("memory", memory),
                               ("flavors", flavor_quotas)) if v is not None}
    if quota:
        spec["quota"] = quota
    queue = {k: v for k, v in (("clusterQueue", cluster_queue), ("priorityClass", priority_class)) if v}
    if queue:
        spec["queue"] = queue
    if ssh_cidrs is not None:
        spec["network"] = {"sshAllowedCIDRs": list(ssh_cidrs)}
    if deletion_policy:
        spec["deletionPolicy"] = deletion_policy
    if adopt_namespace:
        spec["adoptNamespace"] = True
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


# spec fields onboard sets, as paths (the options that set them).
MANAGED_PATHS = (("sshPublicKeys",), ("deletionPolicy",), ("adoptNamespace",), ("quota", "gpus"), ("quota", "cpu"),
                 ("quota", "memory"), ("quota", "flavors"), ("queue", "clusterQueue"),
                 ("queue", "priorityClass"), ("network", "sshAllowedCIDRs"))


def owned_fields(obj: dict, manager: str = FIELD_MANAGER) -> dict:
    """The ``fieldsV1`` of ``manager``'s Apply entry in ``obj``'s managedFields."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            return entry.get("fieldsV1") or {}
    return {}


def keep_current(body: dict, current: dict) -> dict:
    """Server-side apply drops the fields a manager applied before and leaves out now: copy
    the fields devctl owns in ``current`` that no option set this time, so an update changes
    only what the options say and re-running onboard is a no-op."""
    owned = owned_fields(current)
    for path in MANAGED_PATHS:
        node = owned.get("f:spec") or {}
        for key in path:
            node = node.get(f"f:{key}") if isinstance(node, dict) else None
        if node is None:
            continue
        value: Any = current.get("spec") or {}
        for key in path:
            value = (value or {}).get(key)
        target = body["spec"]
        for key in path[:-1]:
            target = target.setdefault(key, {})
        if value is not None and path[-1] not in target:
            target[path[-1]] = value
    return body


def created_by_torchdev(api, namespace: str, user: str) -> bool:
    """Whether the DevUser ``user`` created ``namespace`` (its annotation torchdev.io/created-by:
    the only kind deletionPolicy Delete deletes); True when it does not exist (nothing to keep)."""
    try:
        ns = api.get_namespace(namespace)
    except NotFound:
        return True
    annotations = (ns.get("metadata") or {}).get("annotations") or {}
    return annotations.get(CREATED_BY_ANNOTATION) == f"devuser/{user}"


def user_namespace(obj: dict) -> str:
    return (obj.get("status") or {}).get("namespace") or f"dev-{obj['metadata']['name']}"


def gpu_quota(obj: dict) -> str:
    quota = (obj.get("spec") or {}).get("quota") or {}
    text = str(quota.get("gpus", 0))
    overrides = quota.get("flavors") or []
    if overrides:
        text += " (" + ", ".join(f"{f['name']}={f.get('gpus', quota.get('gpus', 0))}" for f in overrides) + ")"
    return text


def next_steps(obj: dict) -> list[str]:
    """What ``onboard --wait`` prints once the user is Ready."""
    name, status = obj["metadata"]["name"], obj.get("status") or {}
    namespace = user_namespace(obj)
    if status.get("queueName"):
        queue = f"{status['queueName']} (ClusterQueue {status.get('clusterQueue') or '?'})"
    elif status.get("kueue") is False:
        queue = "none (Kueue not installed; the namespace ResourceQuota applies)"
    else:
        queue = "none"
    keys = len((obj.get("spec") or {}).get("sshPublicKeys") or [])
    ssh = (f"{keys} SSH public key(s) in Secret ssh-public-keys" if keys else
           "no SSH public keys: the user passes --ssh-key-file to devctl create")
    return [
        f"user:      {name} <{(obj.get('spec') or {}).get('email', '')}>",
        f"namespace: {namespace}",
        f"queue:     {queue}",
        f"ssh:       {ssh}",
        f"next:      devctl config set-namespace {namespace} && "
        "devctl create my-dev --flavor FLAVOR --wait && devctl ssh my-dev",
    ]


# -- commands -----------------------------------------------------------------------------

class AdminGroup(click.Group):
    """A refusal (403) of any ``devctl admin`` command says what to do: these commands write or
    list DevUsers (cluster-scoped), which the users' ClusterRole does not grant."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            if exc.status != 403:
                raise
            command = " ".join(filter(None, ["devctl admin", ctx.invoked_subcommand]))
            raise ApiError(f"{exc.format_message()}; '{command}' needs a cluster admin's credentials "
                           "(DevUsers are cluster-scoped): ask a cluster admin to run it",
                           status=exc.status, reason=exc.reason) from None


@click.group("admin", cls=AdminGroup)
def admin() -> None:
    """Onboard and offboard users (DevUser objects; cluster admins)."""


@admin.command("onboard")
@click.argument("user", callback=validate_user)
@click.option("--email", callback=_email, metavar="EMAIL",
              help="The user's e-mail: their Kubernetes user name and the owner of their servers "
                   "(required for a new user).")
@click.option("--ssh-key-file", "ssh_key_files", multiple=True, metavar="PATH",
              help="OpenSSH public key file (repeatable; replaces the user's keys).")
@click.option("--github-user", metavar="USER",
              help="Also take the user's public SSH keys from this GitHub account (https://github.com/USER.keys).")
@click.option("--gpus", type=click.IntRange(0, MAX_GPUS), help="GPUs per GPU flavor (default 0).")
@click.option("--cpu", callback=_quantity, metavar="QUANTITY", help="CPU per flavor (default 64).")
@click.option("--memory", callback=_quantity, metavar="QUANTITY", help="Memory per flavor (default 256Gi).")
@click.option("--flavor-quota", "flavor_quotas", multiple=True, metavar="FLAVOR=GPUS[,cpu=Q,memory=Q]",
              help="Per-flavor quota override (repeatable; replaces the user's overrides; Kueue only).")
@click.option("--cluster-queue", metavar="CQ",
              help="Use this existing Kueue ClusterQueue (e.g. a team's) instead of torchdev-<user>.")
@click.option("--priority-class", metavar="NAME",
              help="Kueue WorkloadPriorityClass for the user's servers (torchdev-low|normal|high).")
@click.option("--ssh-cidr", "ssh_cidrs", multiple=True, callback=_cidrs, metavar="CIDR",
              help="Source range allowed to reach SSH (repeatable; default 10.0.0.0/8).")
@click.option("--deletion-policy", type=click.Choice(["Retain", "Delete"]),
              help="What deleting the DevUser does to the namespace and its volumes (default Retain).")
@click.option("--adopt-namespace", is_flag=True, default=None,
              help="Manage an existing namespace dev-USER that torchdev did not create (it is never "
                   "deleted by torchdev).")
@click.option("--force-conflicts", is_flag=True,
              help="Take over fields another field manager owns (server-side apply force).")
@click.option("--wait", "wait_", is_flag=True, help="Wait until the user is Ready.")
@click.option("--timeout", type=DURATION, default="5m", show_default=True, help="How long --wait waits.")
@click.option("--dry-run", type=click.Choice(["client", "server"]), is_flag=False, flag_value="client",
              help="Print the object instead of applying it: client (no API calls, the default) "
                   "or server (validated and defaulted by the API server, not stored).")
@output_option()
@kube_options(namespaced=False)
@pass_settings
def onboard(settings: Settings, user: str, email: str | None, ssh_key_files: tuple[str, ...],
            github_user: str | None, gpus: int | None, cpu: str | None, memory: str | None, flavor_quotas: tuple[str, ...],
            cluster_queue: str | None, priority_class: str | None, ssh_cidrs: tuple[str, ...],
            deletion_policy: str | None, adopt_namespace: bool | None, force_conflicts: bool,
            wait_: bool, timeout: float,
            dry_run: str | None, output: str) -> None:
    """Onboard USER: create their DevUser, or update it (namespace dev-USER, quota, queue, keys).

    Running it again with the same options changes nothing; options not given keep
    their current values.

    \b
    Examples:
      devctl admin onboard alice --email alice@example.com --ssh-key-file alice.pub --gpus 8 --wait
      devctl admin onboard bob --email bob@example.com --github-user bob-gh
      devctl admin onboard alice --flavor-quota gpu-h100-8=16 --priority-class torchdev-high
    """
    keys = read_ssh_keys(ssh_key_files, explicit=True) if ssh_key_files else None
    if github_user:
        from .github import fetch_keys

        keys = (keys or []) + [k for k in fetch_keys(github_user, settings.config) if k not in (keys or [])]
    fields = dict(ssh_keys=keys, gpus=gpus, cpu=cpu, memory=memory,
                  flavor_quotas=parse_flavor_quota(flavor_quotas) if flavor_quotas else None,
                  cluster_queue=cluster_queue, priority_class=priority_class,
                  ssh_cidrs=list(ssh_cidrs) if ssh_cidrs else None, deletion_policy=deletion_policy,
                  adopt_namespace=adopt_namespace)
    if dry_run == "client":
        if not email:
            raise click.UsageError("--dry-run=client needs --email")
        print_object(build_devuser(user, email=email, **fields), "json" if output == "json" else "yaml")
        return

    api = settings.api
    try:
        current = api.get_devuser(user)
    except NotFound:
        current = None
    if current is None and not email:
        raise click.UsageError(f"devuser {user!r} does not exist yet: pass --email EMAIL")
    body = build_devuser(user, email=email or current["spec"]["email"], **fields)
    if current is not None:
        body = keep_current(body, current)
    try:
        applied = api.apply_devuser(body, force=force_conflicts, dry_run=dry_run == "server")
    except ApiError as exc:
        if exc.status == 409:
            raise DevctlError(f"{exc.format_message()}; re-run with --force-conflicts to take "
                              "those fields over") from None
        raise
    if dry_run == "server":
        print_object(applied, "json" if output == "json" else "yaml")
        return

    if current is None:
        verb = "created"
    elif applied["metadata"].get("resourceVersion") == current["metadata"].get("resourceVersion"):
        verb = "unchanged"
    else:
        verb = "configured"
    line = f"{RESOURCE}/{user} {verb}"
    click.echo(line, err=output != "table")
    if wait_:
        with left_in_place(f"devuser {user} ({verb})", f"'devctl admin offboard {user}' removes it"):
            applied = waiting.wait_ready(lambda: api.get_devuser(user), f"devuser/{user}", timeout)
        info(f"devuser/{user} is Ready")
        for text in next_steps(applied):
            click.echo(text, err=output != "table")
    if output != "table":
        print_object(applied, output)


@admin.command("offboard")
@click.argument("user", callback=validate_user, shell_complete=complete.users)
@click.option("--delete-data", is_flag=True,
              help="Also delete the namespace dev-USER with every volume in it; the data is lost.")
@click.option("-y", "--yes", is_flag=True,
              help="Do not ask for confirmation (needed for --delete-data without a terminal).")
@click.option("--wait", "wait_", is_flag=True, help="Wait until the DevUser (and with --delete-data "
                                                    "the namespace) is gone.")
@click.option("--timeout", type=DURATION, default="5m", show_default=True, help="How long --wait waits.")
@kube_options(namespaced=False)
@pass_settings
def offboard(settings: Settings, user: str, delete_data: bool, yes: bool, wait_: bool,
             timeout: float) -> None:
    """Offboard USER: delete their DevUser.

    By default the namespace dev-USER, its volumes and SSH keys are kept and the user's
    dev servers are suspended (deletionPolicy Retain); --delete-data deletes them.
    """
    api = settings.api
    obj = api.get_devuser(user)
    namespace = user_namespace(obj)
    policy = (obj.get("spec") or {}).get("deletionPolicy") or "Retain"
    if delete_data and not created_by_torchdev(api, namespace, user):
        raise DevctlError(f"namespace {namespace} was not created by torchdev (adopted, or someone "
                          "else's): --delete-data never deletes it; offboard without --delete-data "
                          "and delete the namespace yourself if you mean to")
    if delete_data:
        if not yes:
            what = f"namespace {namespace} with every dev server, home and shared volume in it"
            if not _stdin_is_tty():
                raise DevctlError(f"refusing to delete {what} without confirmation: stdin is not "
                                  "a terminal; pass --yes to confirm")
            click.confirm(f"Offboard {user} and delete {what}? The data is lost", abort=True, err=True)
        if policy != "Delete":
            api.patch_devuser(user, {"spec": {"deletionPolicy": "Delete"}})
    elif policy != "Retain":
        # The command's default keeps the data, whatever was set at onboarding.
        api.patch_devuser(user, {"spec": {"deletionPolicy": "Retain"}})
        info(f"deletionPolicy of devuser/{user} was {policy}; set to Retain to keep the data "
             "(pass --delete-data to delete it)")
    api.delete_devuser(user)
    click.echo(f'{RESOURCE} "{user}" deleted')
    if delete_data:
        click.echo(f"namespace {namespace} is deleted with every dev server and volume in it "
                   "(deletionPolicy Delete)")
    else:
        click.echo(f"kept namespace {namespace}, its volumes and SSH keys (deletionPolicy Retain); "
                   f"the user's dev servers are suspended and their access removed; "
                   f"'devctl admin onboard {user}' restores it, "
                   f"'devctl admin offboard {user} --delete-data' deletes the data")
    if wait_:
        gone = {f"devuser/{user}": lambda: api.get_devuser(user)}
        if delete_data:
            gone[f"namespace/{namespace}"] = lambda: api.get_namespace(namespace)
        waiting.wait_gone(gone, timeout)


@admin.command("users")
@selector_option("users")
@output_option(formats=LIST_FORMATS)
@kube_options(namespaced=False)
@pass_settings
def users(settings: Settings, selector: str | None, output: str) -> None:
    """List the onboarded users (DevUsers): e-mail, namespace, GPU quota, phase (-o wide adds the
    ClusterQueue, the priority class and the deletion policy)."""
    items = sorted(settings.api.list_devusers(selector), key=lambda o: o["metadata"]["name"])
    if print_objects(items, output, RESOURCE):
        return
    wide = output == "wide"
    rows = []
    for o in items:
        spec, status = o.get("spec") or {}, o.get("status") or {}
        rows.append([o["metadata"]["name"], " ".join(str(spec.get("email") or "").split()), user_namespace(o),
                     gpu_quota(o), status.get("queueName") or "-", status.get("phase") or "Pending",
                     age(o["metadata"].get("creationTimestamp"))]
                    + ([status.get("clusterQueue") or "-", (spec.get("quota") or {}).get("priorityClass") or "-",
                        spec.get("deletionPolicy") or "-"] if wide else []))
    print_table(["NAME", "EMAIL", "NAMESPACE", "GPUS", "QUEUE", "PHASE", "AGE"]
                + (["CLUSTER-QUEUE", "PRIORITY-CLASS", "DELETION-POLICY"] if wide else []), rows,
                empty="No devusers found.")
