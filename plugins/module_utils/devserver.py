# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServer spec rules: what the CRD cannot check (spec errors, ignored fields), the
container env, the replicas, and what only the cluster can say (a claim that does not exist,
a quota the server can never fit in)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils.plan import plain
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity, quantity, scale

# --------------------------------------------------------------------------- env
# Set by the operator on every pod of a distributed DevServer (plugins/filter/rendezvous.py);
# NCCL_* / FI_* go through spec.distributed.ncclSettings, merged over the safe defaults.
DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "NPROC_PER_NODE", "NODE_RANK")


DISTRIBUTED_ENV_PREFIXES = ("NCCL_", "FI_")


def env(raw_env, builtin, reserved_env=None, default_env=None, distributed=False):
    """User env (raw, never snake_cased) plus the operator's variables.

    ``builtin`` is a mapping name -> value and ``reserved_env`` a list of EnvVar dicts
    (``valueFrom`` allowed, e.g. the rendezvous env): both are the operator's and come
    first, sorted by name, so that a user's ``$(TORCHDEV_NAME)`` reference expands.
    ``default_env`` (EnvVar dicts) are defaults a user variable of the same name
    replaces (e.g. PATH).  Users may not set reserved names, nor in a ``distributed``
    DevServer the rendezvous variables or NCCL_/FI_ ones (ValueError -> InvalidSpec).
    """
    ops = [{"name": str(k), "value": str(v)} for k, v in (builtin or {}).items()]
    ops += [plain(item) for item in reserved_env or []]
    reserved = {item["name"] for item in ops}
    user, seen = [], set()
    for item in raw_env or []:
        name = item.get("name")
        if not name:
            raise ValueError("spec.env entries need a name")
        if name in reserved or name.startswith("TORCHDEV_"):
            raise ValueError("spec.env: %s is reserved for the operator" % name)
        if distributed and (name in DISTRIBUTED_ENV or name.startswith(DISTRIBUTED_ENV_PREFIXES)):
            raise ValueError("spec.env: %s is set by the operator in distributed mode%s" % (
                name, " (use spec.distributed.ncclSettings)" if name.startswith(DISTRIBUTED_ENV_PREFIXES) else ""))
        if name in seen:
            raise ValueError("spec.env: duplicate variable %s" % name)
        seen.add(name)
        entry = {"name": name}
        if "valueFrom" in item and item["valueFrom"] is not None:
            entry["valueFrom"] = item["valueFrom"]
        else:
            entry["value"] = "" if item.get("value") is None else str(item["value"])
        user.append(entry)
    ops += [plain(item) for item in default_env or [] if item["name"] not in seen and item["name"] not in reserved]
    return sorted(ops, key=lambda item: item["name"]) + user


# --------------------------------------------------------------------------- spec checks
def spec_errors(spec):
    """Problems of a (defaulted, raw camelCase) DevServer spec the CRD cannot express."""
    spec = spec or {}
    errors = []
    for field in ("owner", "flavor"):
        if not spec.get(field):
            errors.append("spec.%s is required" % field)
    try:
        size = parse_quantity(spec.get("persistentHomeSize", "100Gi"))
        if size < parse_quantity("1Gi"):
            errors.append("spec.persistentHomeSize must be at least 1Gi")
    except ValueError as exc:
        errors.append("spec.persistentHomeSize: %s" % exc)
    try:
        env(spec.get("env"), {}, distributed=spec.get("mode", "standalone") == "distributed")
    except ValueError as exc:
        errors.append(str(exc))
    if spec.get("mode", "standalone") == "distributed":
        dist = spec.get("distributed") or {}
        world, nprocs = dist.get("worldSize"), dist.get("nprocsPerNode", 1) or 1
        if not world:
            errors.append("spec.distributed.worldSize is required in distributed mode")
        elif int(world) % int(nprocs):
            errors.append("spec.distributed.worldSize (%s) must be a multiple of nprocsPerNode (%s)" % (world, nprocs))
    ref = spec.get("sshKeySecretRef") or {}
    if ref and not ref.get("name"):
        errors.append("spec.sshKeySecretRef.name is required")
    return errors


def spec_warnings(spec):
    """What the operator accepts in a DevServer spec but does not act on (status.warnings):
    a ``distributed`` block on a standalone server (seed 000's example has one) is ignored."""
    spec = spec or {}
    warnings = []
    if spec.get("mode", "standalone") != "distributed" and spec.get("distributed"):
        warnings.append("spec.distributed is ignored: spec.mode is standalone. Remove the block, "
                        "or create a new DevServer with mode: distributed (mode is immutable).")
    return warnings


def spec_problem(spec):
    """{reason: InvalidSpec, message} for a DevServer spec the role cannot serve, else None."""
    errors = spec_errors(spec)
    return {"reason": "InvalidSpec", "message": "; ".join(errors)} if errors else None


# --------------------------------------------------------------------------- placement
# ResourceQuota ``hard`` keys a server's pods and home claims count against, and how much one
# replica needs of each: compute resources from the flavor's requests (its limit when it sets
# only that, as the API server defaults a request) and limits, claims and storage from its home.
_COMPUTE = ("cpu", "memory", "ephemeral-storage", "nvidia.com/gpu")


def _per_replica(resources, home_size):
    requests = dict((resources or {}).get("limits") or {})
    requests.update((resources or {}).get("requests") or {})
    need = {"pods": 1, "persistentvolumeclaims": 1, "requests.storage": home_size}
    for name in _COMPUTE:
        if name in requests:
            need["requests." + name] = requests[name]
            if name in ("cpu", "memory"):
                need[name] = requests[name]
        limit = ((resources or {}).get("limits") or {}).get(name)
        if limit is not None:
            need["limits." + name] = limit
    return need


def placement_problem(spec, claim=None, quotas=None, resources=None, replicas=1, flavor=None):
    """{reason, message} when the cluster can never run the server as asked, else None:

    * ``ClaimNotFound``: spec.sharedVolumeClaimName names a claim (``claim``: the object read,
      None when missing) that does not exist in the namespace: the pods would stay Pending;
    * ``QuotaExceeded``: the server alone (``replicas`` pods of the flavor's ``resources``, one
      home claim each) needs more of something than a ResourceQuota of the namespace
      (``quotas``: the list read) allows in all: it could never start, whatever else stops.

    Quotas with scopes are left out (they count only some pods)."""
    spec = spec or {}
    name = spec.get("sharedVolumeClaimName")
    if name and claim is None:
        return {"reason": "ClaimNotFound",
                "message": "spec.sharedVolumeClaimName: PersistentVolumeClaim %s does not exist in the "
                           "namespace (create it, or remove sharedVolumeClaimName)" % name}
    replicas = int(replicas or 0)
    if replicas < 1 or not resources or spec.get("suspend"):
        return None
    need = _per_replica(resources, spec.get("persistentHomeSize", "100Gi"))
    for quota in quotas or []:
        qspec = quota.get("spec") or {}
        if qspec.get("scopes") or qspec.get("scopeSelector"):
            continue
        for key, hard in sorted((qspec.get("hard") or {}).items()):
            if key not in need:
                continue
            if parse_quantity(need[key]) * replicas > parse_quantity(hard):
                per = " (%d replicas x %s)" % (replicas, quantity(need[key])) if replicas > 1 else ""
                return {"reason": "QuotaExceeded",
                        "message": "spec.flavor: the server needs %s %s%s with flavor %s, more than ResourceQuota %s "
                                   "allows in the namespace (%s): it can never start; ask for a smaller flavor or "
                                   "a larger quota" % (key, scale(need[key], replicas), per, flavor or spec.get("flavor"),
                                                       (quota.get("metadata") or {}).get("name"), hard)}
    return None


def owner_problem(spec, devuser=None, namespace=None):
    """{reason: OwnerMismatch, message} when the namespace belongs to a DevUser (``devuser``: the
    object read, None when the namespace has none) and spec.owner is not that DevUser's
    spec.email: the owner becomes the UsageRecords' and the metrics' user, so a server in
    dev-alice is billed to alice only.  None otherwise (no DevUser, or one without an e-mail:
    nothing to compare with).  Exact comparison (what the records store).  Never raises."""
    user_spec = (devuser or {}).get("spec") if isinstance(devuser, dict) else None
    email = (user_spec or {}).get("email") if isinstance(user_spec, dict) else None
    if not isinstance(email, str) or not email:
        return None
    owner = (spec or {}).get("owner") if isinstance(spec, dict) else None
    if owner == email:
        return None
    meta = devuser.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    owner = owner[:254] if isinstance(owner, str) else "(missing)"
    where = "namespace %s" % namespace if namespace else "this namespace"
    return {"reason": "OwnerMismatch",
            "message": "spec.owner %s is not the owner of %s: it belongs to DevUser %s (spec.email %s), who is "
                       "billed for every server in it; set spec.owner to %s, or create the server in your own "
                       "namespace" % (owner, where, name, email, email)}


# The data key of the DevUser role's Secret, and sshKeySecretRef.key's default (the CRD's).
AUTHORIZED_KEYS = "authorized_keys"


def ssh_key_secret(spec, devuser=None):
    """The Secret whose authorized_keys sshd accepts besides spec.sshPublicKeys (issue 27.1):
    ``{name, key, optional}``, or ``{}`` for none.

    * spec.sshKeySecretRef with a name: that Secret (key default authorized_keys), required;
      it replaces the DevUser's keys.
    * else, unless spec.mountUserSSHKeys is false, the SSH keys of the DevUser the namespace
      belongs to (``devuser``: the object read, None when the namespace has none): its
      status.sshKeySecretName, the Secret ``devctl admin onboard`` fills, optional (a Secret not
      written yet keeps no pod from starting).
    * nothing when spec.enableSSH is false.

    The keys are merged, not chosen: sshd reads the inline keys' file and this one
    (AuthorizedKeysFile), so both sets log in.  Never raises."""
    spec = spec if isinstance(spec, dict) else {}
    if spec.get("enableSSH", True) is False:
        return {}
    ref = spec.get("sshKeySecretRef")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str) and ref["name"]:
        key = ref.get("key")
        return {"name": ref["name"], "key": key if isinstance(key, str) and key else AUTHORIZED_KEYS,
                "optional": False}
    if spec.get("mountUserSSHKeys", True) is False:
        return {}
    status = devuser.get("status") if isinstance(devuser, dict) else None
    name = status.get("sshKeySecretName") if isinstance(status, dict) else None
    if isinstance(name, str) and name:
        return {"name": name, "key": AUTHORIZED_KEYS, "optional": True}
    return {}


# A claim or a quota created later is no event of the server: how soon to look again (reads only).
PLACEMENT_RECHECK_SECONDS = 60


def problem_requeue(problem, deadline=""):
    """How soon to look again at a server with a ``problem``: at its lifecycle ``deadline``
    ("120s"), and after a ClaimNotFound or QuotaExceeded within PLACEMENT_RECHECK_SECONDS;
    "" when nothing is due (a spec problem waits for the spec to change)."""
    periods = [int(str(deadline).rstrip("s"))] if deadline else []
    if (problem or {}).get("reason") in ("ClaimNotFound", "QuotaExceeded"):
        periods.append(PLACEMENT_RECHECK_SECONDS)
    return "%ds" % min(periods) if periods else ""


# --------------------------------------------------------------------------- ssh exposure
# spec.ssh.serviceType (issue 27.6): how the <name>-ssh Service exposes sshd.  ClusterIP: in the
# cluster only (devctl ssh port-forwards); NodePort / LoadBalancer: a direct address outside it.
SSH_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
EXTERNAL_SSH_SERVICE_TYPES = ("NodePort", "LoadBalancer")
SSH_SERVICE_PORT = 22


def _cidr_list(cidrs):
    """The valid CIDRs (network addresses, host bits clear) of a list or a comma-separated string,
    in order, without duplicates."""
    import ipaddress

    if isinstance(cidrs, str):
        cidrs = cidrs.split(",")
    if not isinstance(cidrs, (list, tuple)):
        return []
    found = []
    for cidr in cidrs:
        if not isinstance(cidr, str):
            continue
        try:
            net = str(ipaddress.ip_network(cidr.strip(), strict=True))
        except ValueError:
            continue
        if net not in found:
            found.append(net)
    return found


def ssh_service(spec, default_type="ClusterIP", external_cidrs=None, devuser=None):
    """How the <name>-ssh Service exposes sshd, and the NetworkPolicy that goes with it:
    ``{type, externalTrafficPolicy, networkPolicyCIDRs}``.

    * type: spec.ssh.serviceType, else the operator's cluster default ``default_type`` (role var
      devserver_ssh_service_type, env TORCHDEV_SSH_SERVICE_TYPE); ClusterIP for anything that is
      not one of SSH_SERVICE_TYPES.
    * externalTrafficPolicy: Local for NodePort and LoadBalancer (None for ClusterIP): the
      client's address reaches the pod (the NetworkPolicy's sources mean what they say) and the
      node port answers on the node the pod runs on, the address status.ssh gives.
    * networkPolicyCIDRs: the sources the NetworkPolicy <name>-ssh lets reach sshd, for an
      external type in a DevUser's namespace (``devuser``: the DevUser read, None when the
      namespace has none), whose default-deny policy would drop that traffic otherwise; the
      valid CIDRs of ``external_cidrs`` (a list or "a,b"; role var devserver_ssh_external_cidrs).
      [] for ClusterIP, outside a DevUser's namespace (nothing of torchdev isolates the pod
      there), or without a valid CIDR (no policy: ssh stays reachable from where the DevUser's
      allow-ssh allows).

    Never raises."""
    spec = spec if isinstance(spec, dict) else {}
    ssh = spec.get("ssh")
    wanted = ssh.get("serviceType") if isinstance(ssh, dict) else None
    kind = wanted if isinstance(wanted, str) and wanted in SSH_SERVICE_TYPES else None
    if kind is None and wanted is None:
        kind = default_type if isinstance(default_type, str) and default_type in SSH_SERVICE_TYPES else None
    kind = kind or "ClusterIP"
    external = kind in EXTERNAL_SSH_SERVICE_TYPES
    return {"type": kind,
            "externalTrafficPolicy": "Local" if external else None,
            "networkPolicyCIDRs": _cidr_list(external_cidrs) if external and isinstance(devuser, dict) else []}


def _ssh_host(value):
    """An IP address or a DNS name as an address may be written in a command line, else None."""
    import re

    if isinstance(value, str) and 0 < len(value) <= 253 and re.match(r"^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$", value):
        return value
    return None


def _replica0(pods, name):
    for pod in pods if isinstance(pods, list) else []:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if isinstance(meta, dict) and isinstance(name, str) and meta.get("name") == "%s-0" % name:
            return pod
    return None


def ssh_node_name(service_type, pods, name):
    """The node whose address a NodePort server's status.ssh gives: the one its replica 0 (the
    pod the <name>-ssh Service selects) runs on; "" when there is none to read (another type, a
    pod not scheduled yet).  Never raises."""
    if service_type != "NodePort":
        return ""
    pod = _replica0(pods, name)
    node = (pod.get("spec") or {}).get("nodeName") if isinstance(pod, dict) and isinstance(pod.get("spec"), dict) else None
    return node if isinstance(node, str) and _ssh_host(node) else ""


def _ssh_port(service):
    spec = service.get("spec") if isinstance(service, dict) else None
    ports = spec.get("ports") if isinstance(spec, dict) else None
    for port in ports if isinstance(ports, list) else []:
        if isinstance(port, dict) and port.get("port") == SSH_SERVICE_PORT:
            return port
    return {}


def _valid_port(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536 else None


def _ssh_command(host, port, user="dev"):
    """The plain ssh command line for ``user`` at host:port."""
    return "ssh -p %d %s@%s" % (port, user, host)


def ssh_access(service, pods=None, name=None, node=None):
    """status.ssh: where sshd answers from outside the cluster, read from the live <name>-ssh
    ``service``; None for a ClusterIP Service or none (devctl ssh port-forwards).

    * NodePort: ``{serviceType, host, port, command}``, port the Service's nodePort, host the
      address of the node replica 0 runs on (``node``, the Node read: its ExternalIP, else its
      InternalIP; without it the pod's status.hostIP), command ``ssh -p <port> dev@<host>``.
      Before the nodePort is allocated or the pod is on a node: ``{serviceType, port?, message}``.
    * LoadBalancer: host the first status.loadBalancer.ingress ip or hostname, port 22; while the
      load balancer has no address (none without a cloud controller): ``{serviceType, message}``.

    A value that is not an address or a port is treated as absent.  Never raises."""
    spec = service.get("spec") if isinstance(service, dict) else None
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind not in EXTERNAL_SSH_SERVICE_TYPES:
        return None
    svc_name = ((service.get("metadata") or {}) if isinstance(service.get("metadata"), dict) else {}).get("name")
    svc_name = svc_name if isinstance(svc_name, str) else "the ssh Service"
    host = port = None
    if kind == "LoadBalancer":
        status = service.get("status") if isinstance(service.get("status"), dict) else {}
        lb = status.get("loadBalancer") if isinstance(status.get("loadBalancer"), dict) else {}
        ingress = lb.get("ingress") if isinstance(lb.get("ingress"), list) else []
        for entry in ingress:
            if isinstance(entry, dict):
                host = _ssh_host(entry.get("ip")) or _ssh_host(entry.get("hostname"))
                if host:
                    break
        port = _valid_port(_ssh_port(service).get("port"))
        if not host or not port:
            return {"serviceType": kind,
                    "message": "waiting for the load balancer's address (status.loadBalancer of Service %s)" % svc_name}
    else:
        port = _valid_port(_ssh_port(service).get("nodePort"))
        if not port:
            return {"serviceType": kind, "message": "waiting for the node port of Service %s" % svc_name}
        node_status = node.get("status") if isinstance(node, dict) and isinstance(node.get("status"), dict) else {}
        addresses = node_status.get("addresses") if isinstance(node_status.get("addresses"), list) else []
        for wanted in ("ExternalIP", "InternalIP"):
            host = next((_ssh_host(a.get("address")) for a in addresses
                         if isinstance(a, dict) and a.get("type") == wanted and _ssh_host(a.get("address"))), None)
            if host:
                break
        if not host:
            pod = _replica0(pods, name)
            pod_status = pod.get("status") if isinstance(pod, dict) and isinstance(pod.get("status"), dict) else {}
            host = _ssh_host(pod_status.get("hostIP"))
        if not host:
            return {"serviceType": kind, "port": port,
                    "message": "waiting for replica 0 to run on a node (its address is the host to connect to)"}
    return {"serviceType": kind, "host": host, "port": port, "command": _ssh_command(host, port)}
