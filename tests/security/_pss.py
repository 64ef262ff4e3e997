"""The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
Kubernetes 1.33): every control of the baseline and restricted profiles, as the
PodSecurity admission plugin (k8s.io/pod-security-admission/policy) evaluates a pod spec.

`violations(pod_spec, metadata)` returns one line per violated control, naming the field.
"""
from __future__ import annotations

from typing import Any, Iterator

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
VOLUME_META_KEYS = frozenset({"name"})


def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, pod metadata) of any workload object: Pod, pod templates, CronJob."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        yield spec, obj.get("metadata") or {}
    elif obj.get("kind") == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        yield template.get("spec") or {}, template.get("metadata") or {}
    elif isinstance(spec.get("template"), dict) and "spec" in spec["template"]:
        yield spec["template"]["spec"], spec["template"].get("metadata") or {}


def _containers(pod: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in pod.get(field) or []:
            yield "%s[%s]" % (field, c.get("name")), c


def violations(pod: dict[str, Any], metadata: dict[str, Any] | None = None, profile: str = "restricted") -> list[str]:
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    containers = list(_containers(pod))
    scs = [(where, c.get("securityContext") or {}) for where, c in containers]
    annotations = (metadata or {}).get("annotations") or {}

    # ---- baseline ----------------------------------------------------------------------
    for where, sc in [("spec", psc)] + scs:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append("%s.securityContext.windowsOptions.hostProcess: HostProcess containers are not allowed" % where)
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append("spec.%s: host namespaces are not allowed" % field)
    for where, sc in scs:
        if sc.get("privileged"):
            out.append("%s.securityContext.privileged: privileged containers are not allowed" % where)
        added = set((sc.get("capabilities") or {}).get("add") or [])
        allowed = RESTRICTED_CAPABILITIES if profile == "restricted" else BASELINE_CAPABILITIES
        if added - allowed:
            out.append("%s.securityContext.capabilities.add: %s not allowed" % (where, sorted(added - allowed)))
        if sc.get("procMount", "Default") != "Default":
            out.append("%s.securityContext.procMount: must be Default" % where)
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            out.append("spec.volumes[%s]: hostPath volumes are not allowed" % v.get("name"))
    for where, c in containers:
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append("%s.ports[%s].hostPort: host ports are not allowed" % (where, p.get("name")))
    for where, sc in [("spec", psc)] + scs:
        apparmor = (sc.get("appArmorProfile") or {}).get("type")
        if apparmor is not None and apparmor not in APPARMOR_TYPES:
            out.append("%s.securityContext.appArmorProfile.type: %s not allowed" % (where, apparmor))
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES:
            out.append("%s.securityContext.seLinuxOptions.type: %s not allowed" % (where, selinux["type"]))
        for key in ("user", "role"):
            if selinux.get(key):
                out.append("%s.securityContext.seLinuxOptions.%s: must not be set" % (where, key))
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append("%s.securityContext.seccompProfile.type: Unconfined is not allowed" % where)
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value in ("runtime/default", "") or value.startswith("localhost/")):
            out.append("metadata.annotations[%s]: %s not allowed" % (key, value))
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append("spec.securityContext.sysctls: %s is not a safe sysctl" % s.get("name"))
    if profile == "baseline":
        return out

    # ---- restricted --------------------------------------------------------------------
    for v in pod.get("volumes") or []:
        kinds = set(v) - VOLUME_META_KEYS
        if kinds - RESTRICTED_VOLUMES:
            out.append("spec.volumes[%s]: volume type %s not allowed" % (v.get("name"), sorted(kinds - RESTRICTED_VOLUMES)))
    for where, sc in scs:
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append("%s.securityContext.allowPrivilegeEscalation: must be false" % where)
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            out.append("%s.securityContext.capabilities.drop: must include ALL" % where)
    pod_non_root = psc.get("runAsNonRoot") is True
    for where, sc in scs:
        if sc.get("runAsNonRoot") is False or (not pod_non_root and sc.get("runAsNonRoot") is not True):
            out.append("%s.securityContext.runAsNonRoot: must be true (here or in spec.securityContext)" % where)
    for where, sc in [("spec", psc)] + scs:
        if sc.get("runAsUser") == 0:
            out.append("%s.securityContext.runAsUser: must not be 0" % where)
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_TYPES:
        out.append("spec.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost")
    for where, sc in scs:
        own = (sc.get("seccompProfile") or {}).get("type")
        if (own is None and pod_seccomp is None) or (own is not None and own not in SECCOMP_TYPES):
            out.append("%s.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost "
                       "(here or in spec.securityContext)" % where)
    return out
