"""Issue 25.1: user text is never template input.

ansible-operator hands a custom resource to Ansible as extra vars; without ``markUnsafe`` Ansible
templates any ``{{ ... }}`` / ``{% ... %}`` in them, i.e. runs code of the user's choosing as the
operator (whose ClusterRole reads Secrets cluster-wide).  Every watch in watches.yaml sets
``markUnsafe: true`` and no role templates user text again (lookups, set_fact of parsed
renders, ...).

The table: three payloads (an expression and a statement that, if evaluated, each write their
own marker file through ``lookup('pipe', 'touch ...')``, and a comment, which evaluation would
delete) in EVERY free-text string field of EVERY watched kind.  The fields come from the CRD
schemas (config/crd/bases): a string field either holds a payload in the hostile objects below or
its CRD pattern/enum/format rejects all three payloads (asserted), or it is named in EXCLUDED
with the reason; a new CRD field fails test_every_free_text_field_is_covered until it is placed.
The operator (kubesim + the local runtime + the real watches.yaml and roles) then reconciles
one object per kind and payload; the test asserts: no marker file, every payload the kind
renders reaches the rendered children byte for byte, and the object converges.  `make test` runs
it with ansible-core 2.19 (.venv), `make test-image` with the image's 2.18.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import uuid
from datetime import datetime

import pytest
import yaml

from _e2e_helpers import GROUP, KEY, ROOT, VERSION, condition

KEY_PREFIX = " ".join(KEY.split()[:2]) + " "  # an SSH key's comment is free text
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

CRDS = {yaml.safe_load(p.read_text())["spec"]["names"]["kind"]: yaml.safe_load(p.read_text())
        for p in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml"))}
WATCHED = [w["kind"] for w in yaml.safe_load((ROOT / "watches.yaml").read_text())]

# The marker directory: short (some fields hold 63 characters), unique per test run.
MARK = f"/tmp/td{uuid.uuid4().hex[:4]}"
VARIANTS = ("expression", "statement", "comment")


def payload(variant: str, n: int, prefix: str = "", suffix: str = "") -> str:
    """No whitespace (e-mail addresses allow none): ${IFS} is the shell's space."""
    touch = "lookup('pipe','touch${IFS}%s/%d')" % (MARK, n)
    body = {"expression": "{{%s}}" % touch, "statement": "{%%if(%s)%%}{%%endif%%}" % touch,
            "comment": "x{#%d#}y" % n}[variant]
    return prefix + body + suffix


# String fields no payload goes into although their CRD lets braces through, and why.
EXCLUDED = {
    ("EphemeralAccelerationJob", "spec.pvcSize"): "a quantity (the role rejects anything else) of at most 32 "
                                                  "characters: no payload that writes a marker fits",
}


# --- the CRD's string fields ----------------------------------------------------------------------

def _string_fields(schema: dict, path: str, out: dict) -> None:
    if schema.get("type") == "array":
        _string_fields(schema.get("items") or {}, path + ".[]", out)
    elif schema.get("type") == "object" or "properties" in schema:
        for key, sub in (schema.get("properties") or {}).items():
            _string_fields(sub, f"{path}.{key}", out)
        if isinstance(schema.get("additionalProperties"), dict):
            _string_fields(schema["additionalProperties"], path + ".*", out)
    elif schema.get("type") == "string":
        out[path] = schema


def string_fields(kind: str) -> dict[str, dict]:
    """{path (lists as [], map values as *): schema} of every string field of the kind's spec."""
    out: dict[str, dict] = {}
    version = CRDS[kind]["spec"]["versions"][0]
    _string_fields(version["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec", out)
    return out


def rejects_braces(schema: dict) -> bool:
    """The schema admits none of the payloads (nor a payload behind any prefix a pattern wants)."""
    samples = [payload(v, 0, p) for v in VARIANTS for p in ("", "/", "https://", "s3://", "a", "0")]
    if "enum" in schema:
        return not any(s in schema["enum"] for s in samples)
    if "pattern" in schema:
        return not any(re.search(schema["pattern"], s) for s in samples)
    if schema.get("format") == "date-time":
        def parses(s):
            try:
                datetime.fromisoformat(s)
                return True
            except ValueError:
                return False
        return not any(parses(s) for s in samples)
    return False


# --- the hostile objects --------------------------------------------------------------------------

class Placer:
    """Numbers the payloads of one object and remembers which field each one is in."""

    def __init__(self, kind: str, variant: str, namespace: str = "ns"):
        self.base = 1000 * list(SPECS).index(kind) + 100 * VARIANTS.index(variant)  # marker names
        self.variant = variant
        self.namespace = namespace
        self.n = 0
        self.values: dict[str, str] = {}  # payload -> field path

    def __call__(self, field: str, prefix: str = "", suffix: str = "") -> str:
        self.n += 1
        value = payload(self.variant, self.base + self.n, prefix, suffix)
        self.values[value] = field
        return value


def devserverflavor_spec(p: Placer) -> dict:
    return [{"description": p("spec.description"),
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "nodeSelector": {"torchdev.io/node-pool": p("spec.nodeSelector.*")},
            "tolerations": [{"key": p("spec.tolerations.[].key"), "operator": "Equal",
                             "value": p("spec.tolerations.[].value"), "effect": "NoSchedule"}],
            "pricePerHour": "0.5"}]


def env(p: Placer) -> list:
    return [{"name": "PLAIN", "value": p("spec.env.[].value")},
                    {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {
                        "name": p("spec.env.[].valueFrom.configMapKeyRef.name"),
                        "key": p("spec.env.[].valueFrom.configMapKeyRef.key"), "optional": True}}},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {
                        "name": p("spec.env.[].valueFrom.secretKeyRef.name"),
                        "key": p("spec.env.[].valueFrom.secretKeyRef.key"), "optional": True}}},
                    {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {
                        "apiVersion": p("spec.env.[].valueFrom.fieldRef.apiVersion"),
                        "fieldPath": p("spec.env.[].valueFrom.fieldRef.fieldPath")}}},
                    {"name": "FROM_RESOURCE", "valueFrom": {"resourceFieldRef": {
                        "containerName": p("spec.env.[].valueFrom.resourceFieldRef.containerName"),
                        "resource": p("spec.env.[].valueFrom.resourceFieldRef.resource")}}}]


def devserver_spec(p: Placer) -> dict:
    return [{"owner": p("spec.owner", suffix="@example.com"), "flavor": "cpu-small",
             "sshPublicKeys": [KEY, p("spec.sshPublicKeys.[]", KEY_PREFIX)], "image": p("spec.image"),
             "mode": "distributed", "distributed": {"worldSize": 1, "backend": "gloo", "ncclSettings": {
                 "NCCL_DEBUG": p("spec.distributed.ncclSettings.*")}},
             "env": env(p)}]


def devuser_spec(p: Placer) -> dict:
    return [{"email": p("spec.email", suffix="@example.com"), "displayName": p("spec.displayName"),
             "sshPublicKeys": [KEY, p("spec.sshPublicKeys.[]", KEY_PREFIX)]}]


def _selector(p: Placer, at: str) -> dict:
    return {"matchLabels": {"app": p(f"{at}.matchLabels.*")},
            "matchExpressions": [{"key": p(f"{at}.matchExpressions.[].key"), "operator": "NotIn",
                                  "values": [p(f"{at}.matchExpressions.[].values.[]")]}]}


def _pod_term(p: Placer, at: str) -> dict:
    return {"labelSelector": _selector(p, f"{at}.labelSelector"),
            "namespaceSelector": _selector(p, f"{at}.namespaceSelector"),
            "namespaces": [p(f"{at}.namespaces.[]")], "topologyKey": p(f"{at}.topologyKey")}


def _node_term(p: Placer, at: str) -> dict:
    return {kind: [{"key": p(f"{at}.{kind}.[].key"), "operator": "NotIn", "values": [p(f"{at}.{kind}.[].values.[]")]}]
            for kind in ("matchExpressions", "matchFields")}


def trainingjob_spec(p: Placer) -> dict:
    a = "spec.scheduling.affinity"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_node_term(
                p, f"{a}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.[]")]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": _node_term(
                p, f"{a}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.[].preference")}]},
    }
    for kind in ("podAffinity", "podAntiAffinity"):
        affinity[kind] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(
                p, f"{a}.{kind}.requiredDuringSchedulingIgnoredDuringExecution.[]")],
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": _pod_term(
                p, f"{a}.{kind}.preferredDuringSchedulingIgnoredDuringExecution.[].podAffinityTerm")}]}
    base = {"numWorkers": 1, "gpusPerWorker": 0, "networking": {"backend": "gloo"}}
    return [dict(base, model=p("spec.model"), dataset=p("spec.dataset"), image=p("spec.image"),
                 command=[p("spec.command.[]")], args=[p("spec.args.[]")], env=env(p),
                 hyperparameters={"epochs": 1, "additionalParams": {
                     "extra": p("spec.hyperparameters.additionalParams.*")}},
                 checkpoint={"enabled": True,
                             "resumeFrom": p("spec.checkpoint.resumeFrom", f"s3://bucket/{p.namespace}/"),
                             "storage": {"type": "s3", "s3Bucket": "bucket", "secretName": "s3-credentials",
                                         "s3Prefix": p("spec.checkpoint.storage.s3Prefix"),
                                         "s3Region": p("spec.checkpoint.storage.s3Region"),
                                         "s3Endpoint": p("spec.checkpoint.storage.s3Endpoint", "https://")}},
                 monitoring={"mlflowTrackingUri": p("spec.monitoring.mlflowTrackingUri", "https://"),
                             "wandbProject": p("spec.monitoring.wandbProject")},
                 scheduling={"affinity": affinity,
                             "tolerations": [{"key": p("spec.scheduling.tolerations.[].key"), "operator": "Equal",
                                              "value": p("spec.scheduling.tolerations.[].value"),
                                              "effect": "NoSchedule"}]}),
            # type pvc's own fields, and a nodeSelector (its value must be a node's label, so this
            # one does not schedule: the kind's converged state is checked on the first only)
            dict(base, model="mlp", dataset="synthetic",
                 checkpoint={"enabled": True,
                             "storage": {"type": "pvc", "size": "1Gi",
                                         "mountPath": p("spec.checkpoint.storage.mountPath", "/"),
                                         "storageClassName": p("spec.checkpoint.storage.storageClassName")}},
                 scheduling={"nodeSelector": {"torchdev.io/node-pool": p("spec.scheduling.nodeSelector.*")}})]


def eaj_spec(p: Placer) -> dict:
    return [{"model": p("spec.model", "/artifacts/", ".pt"),
             "input": {"type": "directory", "path": p("spec.input.path", "/artifacts/")},
             "output": {"path": p("spec.output.path", "/artifacts/", ".json")}, "image": p("spec.image"),
             "resources": {"gpu": 0}}]


SPECS = {"DevServerFlavor": devserverflavor_spec, "DevServer": devserver_spec, "DevUser": devuser_spec,
         "TrainingJob": trainingjob_spec, "EphemeralAccelerationJob": eaj_spec}


def placed(kind: str, variant: str = "expression", namespace: str = "ns") -> tuple[list[dict], dict[str, str]]:
    """The kind's hostile specs with this variant's payloads, and {payload: field}."""
    p = Placer(kind, variant, namespace)
    specs = SPECS[kind](p)
    return specs, p.values


# --- the table is complete ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", WATCHED)
def test_every_free_text_field_is_covered(kind):
    """Each string field of each watched kind holds a payload, or its CRD rejects braces, or it is
    in EXCLUDED with a reason; each payload fits its field's maxLength and pattern."""
    fields = string_fields(kind)
    assert kind in SPECS, f"{kind} is watched: give it a hostile spec"
    _, values = placed(kind, "statement")  # the longest payloads
    covered = set(values.values())
    schema_of = dict(fields)
    for value, field in values.items():
        assert field in schema_of, f"{kind}: {field} is not a string field of the CRD"
        s = schema_of[field]
        assert len(value) <= s.get("maxLength", 10**9), f"{kind} {field}: payload longer than maxLength"
        if "pattern" in s:
            assert re.search(s["pattern"], value), f"{kind} {field}: payload does not match the pattern"
    missing = [f for f, s in fields.items()
               if f not in covered and (kind, f) not in EXCLUDED and not rejects_braces(s)]
    assert missing == [], f"{kind}: free-text fields without a payload: {missing}"
    for f in covered:
        assert not rejects_braces(fields[f]), f"{kind} {f}"


def test_table_size():
    """The figure for the issue: fields x payloads."""
    per_kind = {k: len(set(placed(k)[1].values())) for k in WATCHED}
    rejected = {k: sum(1 for s in string_fields(k).values() if rejects_braces(s)) for k in WATCHED}
    print(f"\ntemplate-injection table: {sum(per_kind.values())} fields x {len(VARIANTS)} payloads = "
          f"{sum(per_kind.values()) * len(VARIANTS)} cases ({per_kind}); fields whose CRD rejects braces: {rejected}")
    assert all(per_kind.values())


def test_every_watch_marks_the_resource_unsafe():
    """markUnsafe: true on every watch of watches.yaml (ansible-operator's default is false)."""
    from torchdev_runtime.runtime import collections_environ
    from torchdev_runtime.watches import load_watches

    raw = yaml.safe_load((ROOT / "watches.yaml").read_text())
    assert raw and all(w.get("markUnsafe") is True for w in raw), [w["kind"] for w in raw if w.get("markUnsafe") is not True]
    watches = load_watches(str(ROOT / "watches.yaml"), environ=collections_environ(str(ROOT / "ansible.cfg")))
    assert len(watches) == len(raw) and all(w.mark_unsafe for w in watches)


# --- end to end -----------------------------------------------------------------------------------

PLURALS = {"DevServerFlavor": "devserverflavors", "DevServer": "devservers", "DevUser": "devusers",
           "TrainingJob": "trainingjobs", "EphemeralAccelerationJob": "ephemeralaccelerationjobs"}
CLUSTER_SCOPED = {"DevServerFlavor", "DevUser"}
# Fields that reach no child object byte for byte; every other payload must.
NOT_RENDERED: dict[str, set[str]] = {
    # a flavor renders nothing itself without Kueue; its fields reach DevServers' StatefulSets
    "DevServerFlavor": {"spec.description", "spec.nodeSelector.*", "spec.tolerations.[].key",
                        "spec.tolerations.[].value"},
    # the e-mail address becomes the torchdev.io/owner label (a label-safe form of it); the
    # display name is for people reading the DevUser
    "DevUser": {"spec.email", "spec.displayName"},
}


@pytest.fixture(scope="module")
def marks():
    os.mkdir(MARK)  # fails if another run uses the same name
    yield MARK
    shutil.rmtree(MARK, ignore_errors=True)


def _strings(value, out: list) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(str(k))
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    elif isinstance(value, str):
        out.append(value)


def rendered_strings(kube, namespaces) -> list[str]:
    """Every string of every object in the namespaces (Secrets' data decoded)."""
    from kubernetes import client

    api = kube["client"]
    batch, apps = client.BatchV1Api(api), kube["apps"]
    out: list[str] = []
    for ns in namespaces:
        for items in (apps.list_namespaced_stateful_set(ns).items, batch.list_namespaced_job(ns).items,
                      kube["core"].list_namespaced_pod(ns).items, kube["core"].list_namespaced_config_map(ns).items,
                      kube["core"].list_namespaced_service(ns).items,
                      kube["core"].list_namespaced_persistent_volume_claim(ns).items):
            _strings([api.sanitize_for_serialization(i) for i in items], out)
        for secret in kube["core"].list_namespaced_secret(ns).items:
            out += [base64.b64decode(v).decode("utf-8", "replace") for v in (secret.data or {}).values()]
    return out


def converged(kind: str, obj: dict) -> bool:
    st = obj.get("status") or {}
    if st.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    if kind == "TrainingJob":
        # the workers' Job is applied and the operator waits for its pods: the simulated
        # scheduler cannot place pods whose nodeSelector holds a payload
        return st.get("state") in ("Initializing", "Running") and bool(st.get("jobName"))
    if kind == "EphemeralAccelerationJob":
        return st.get("phase") == "Running"
    return condition(obj, "Ready").get("status") == "True"


@pytest.mark.parametrize("kind", WATCHED)
def test_payloads_are_never_evaluated(sim, kube, runtime, marks, kind):
    from _e2e_helpers import new_namespace

    custom = kube["custom"]
    ns = None if kind in CLUSTER_SCOPED else new_namespace(kube)
    names, values, annotations = [], {}, []
    for variant in VARIANTS:
        specs, placed_values = placed(kind, variant, ns or "")
        values.update(placed_values)
        for i, spec in enumerate(specs):
            name = f"inj-{kind.lower()[:8]}-{variant[:4]}-{i}"
            # annotations reach the roles too (_torchdev_io_<kind>): one payload there as well
            note = payload(variant, 1000 * list(SPECS).index(kind) + 100 * VARIANTS.index(variant) + 90 + i)
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "spec": spec,
                    "metadata": {"name": name, "annotations": {"example.com/note": note}}}
            annotations.append(note)
            if ns is None:
                custom.create_cluster_custom_object(GROUP, VERSION, PLURALS[kind], body)
            else:
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], body)
            names.append(name)

    def get(name):
        if ns is None:
            return custom.get_cluster_custom_object(GROUP, VERSION, PLURALS[kind], name)
        return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], name)

    def states():
        return {n: (lambda o: ((o.get("status") or {}).get("state") or (o.get("status") or {}).get("phase"),
                               condition(o, "Ready").get("reason"), condition(o, "Ready").get("message"),
                               condition(o, "Degraded").get("message")))(get(n)) for n in names}

    mine = {re.search(r"/(\d+)'\)", v).group(1) for v in [*values, *annotations] if "lookup" in v}

    def evaluated():
        return sorted(set(os.listdir(marks)) & mine, key=int)
    try:
        sim.wait_for(lambda: all(converged(kind, get(n)) for n in names), 180, interval=0.2,
                     message=f"the hostile {kind}s to converge")
    finally:
        print(f"\n{kind}: {len(set(values.values()))} fields x {len(VARIANTS)} payloads; states {states()}; "
              f"evaluated: {len(evaluated())} of {len(mine)} marker payloads")
    assert evaluated() == [], f"{kind}: payloads evaluated by the operator (marker files {evaluated()})"

    namespaces = [ns] if ns else []
    if kind == "DevUser":
        namespaces = [get(n)["status"]["namespace"] for n in names]
    strings = rendered_strings(kube, namespaces)
    missing = sorted({f for v, f in values.items() if not any(v in s for s in strings)})
    assert set(missing) == NOT_RENDERED.get(kind, set()), f"{kind}: payloads not found byte for byte: {missing}"

    # the deletion: finalizer runs (DevServer, DevUser) get the same object, with their vars
    from kubernetes.client import ApiException

    for n in names:
        if ns is None:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURALS[kind], n)
        else:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], n)

    def gone(n):
        try:
            get(n)
        except ApiException as exc:
            return exc.status == 404
        return False
    sim.wait_for(lambda: all(gone(n) for n in names), 120, interval=0.2, message=f"the hostile {kind}s deleted")
    assert evaluated() == [], f"{kind}: payloads evaluated on deletion (marker files {evaluated()})"
    if kind == "DevServer":  # the finalizer's UsageRecord bills the owner, byte for byte
        records = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "usagerecords")["items"]
        owners = {v for v, f in values.items() if f == "spec.owner"}
        assert {r["spec"]["user"] for r in records} == owners


def test_payloads_in_a_rejected_spec_are_never_evaluated(sim, kube, runtime, marks):
    """The problem path: a message that quotes the user's value (status, Warning Event) carries
    it as data, byte for byte, on both ansible-core versions."""
    from _e2e_helpers import new_namespace

    ns = new_namespace(kube)
    bad = {}
    for variant in VARIANTS:
        value = payload(variant, 900 + VARIANTS.index(variant), "s3://bucket/elsewhere/")
        name = f"inj-rejected-{variant[:4]}"
        bad[name] = value
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"model": "mlp", "dataset": "synthetic", "numWorkers": 1, "gpusPerWorker": 0,
                     "networking": {"backend": "gloo"}, "hyperparameters": {"epochs": 1},
                     "checkpoint": {"enabled": True, "resumeFrom": value,
                                    "storage": {"type": "s3", "s3Bucket": "bucket", "secretName": "s3"}}}})

    def rejected(name):
        obj = kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name)
        st = obj.get("status") or {}
        return st.get("state") == "Failed" and st.get("observedGeneration") == obj["metadata"]["generation"]
    try:
        sim.wait_for(lambda: all(rejected(n) for n in bad), 180, interval=0.2, message="the rejected TrainingJobs")
    finally:
        print({n: kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", n).get("status")
               for n in bad})
    evaluated = sorted(set(os.listdir(marks)) & {"900", "901"})  # the expression's and the statement's markers
    assert evaluated == [], f"payloads evaluated on the problem path (marker files {evaluated})"
    for name, value in bad.items():
        obj = kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name)
        messages = [c.get("message") or "" for c in obj["status"].get("conditions") or []]
        assert any(value in m for m in messages), (value, messages)
        events = sim.wait_for(lambda: [e for e in kube["core"].list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name}").items if e.type == "Warning"], 30,
            message=f"{name}'s Warning Event")
        assert any(value in (e.message or "") for e in events), (value, [e.message for e in events])
