"""kubesim.protobuf: request bodies in Kubernetes' protobuf encoding.

The messages are written here byte by byte with the field numbers of k8s.io/api's and
k8s.io/apimachinery's generated.proto (a test-only encoder, independent of the table in
kubesim.protobuf), plus bodies captured from kubectl 1.37. Malformed input must give a 400 or
415 Status, never a 500.
"""
from __future__ import annotations

import base64
import json
import random

import pytest

from kubesim import errors, protobuf
from kubesim.tests.conftest import WIDGET_CRD, WIDGET_GROUP, Http, assert_status, make_namespace


# -- a minimal protobuf writer -----------------------------------------------------------------
def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def vi(number: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return varint(number << 3) + varint(value)


def ld(number: int, payload: bytes | str) -> bytes:
    """A length-delimited field (wire type 2)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(data)) + data


def entry(number: int, key: str, value: bytes | str) -> bytes:
    """One map entry: a message {key = 1; value = 2}."""
    return ld(number, ld(1, key) + ld(2, value))


def envelope(raw: bytes, api_version: str = "v1", kind: str = "") -> bytes:
    """The k8s protobuf envelope: magic + runtime.Unknown{typeMeta = 1, raw = 2}."""
    type_meta = (ld(1, api_version) if api_version else b"") + (ld(2, kind) if kind else b"")
    return protobuf.MAGIC + ld(1, type_meta) + ld(2, raw)


def meta(*fields: bytes) -> bytes:
    """ObjectMeta as field 1 of the object."""
    return ld(1, b"".join(fields))


# -- bodies captured from kubectl 1.37 (`kubectl create configmap c --from-literal=a=b`,
# `kubectl create secret generic s --from-literal=a=é`, `kubectl create serviceaccount sa`)
KUBECTL_CONFIGMAP = (b'k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12"\n\x18\n\x01c\x12\x00\x1a\x07defa'
                     b'ult"\x00*\x002\x008\x00B\x00\x12\x06\n\x01a\x12\x01b\x1a\x00"\x00')
KUBECTL_SECRET = (b'k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12%\n\x18\n\x01s\x12\x00\x1a\x07default"'
                  b'\x00*\x002\x008\x00B\x00\x12\x07\n\x01a\x12\x02\xc3\xa9\x1a\x00\x1a\x00"\x00')
KUBECTL_SERVICEACCOUNT = (b'k8s\x00\n\x14\n\x02v1\x12\x0eServiceAccount\x12\x1b\n\x19\n\x02sa\x12'
                          b'\x00\x1a\x07default"\x00*\x002\x008\x00B\x00\x1a\x00"\x00')

DECODED = [
    pytest.param(KUBECTL_CONFIGMAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "b"}},
        id="kubectl-configmap"),
    pytest.param(KUBECTL_SECRET, {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "data": {"a": base64.b64encode("é".encode()).decode()}},
        id="kubectl-secret"),
    pytest.param(KUBECTL_SERVICEACCOUNT, {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "sa", "namespace": "default"}}, id="kubectl-serviceaccount"),
    pytest.param(envelope(meta(
        ld(1, "n"), ld(2, "gen-"), ld(3, "ns"), ld(4, ""), ld(5, ""), ld(6, ""), vi(7, 0),
        ld(8, b""), entry(11, "app", "web"), entry(11, "tier", ""), entry(12, "note", "x: y"),
        ld(13, ld(5, "apps/v1") + ld(1, "Deployment") + ld(3, "d") + ld(4, "u-1") + vi(6, 1)),
        ld(14, "example.com/a"), ld(14, "example.com/b"), vi(10, 0),
        ld(9, vi(1, 1700000000) + vi(2, 5))), kind="ConfigMap"), {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "n", "generateName": "gen-", "namespace": "ns",
            "labels": {"app": "web", "tier": ""}, "annotations": {"note": "x: y"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d",
                                 "uid": "u-1", "controller": True}],
            "finalizers": ["example.com/a", "example.com/b"],
            "deletionGracePeriodSeconds": 0, "deletionTimestamp": "2023-11-14T22:13:20Z"}},
        id="objectmeta-every-field-kubectl-may-set"),
    pytest.param(envelope(meta(ld(1, "c")) + entry(2, "k", "v") + entry(3, "bin", b"\x00\xff")
                          + vi(4, 0), kind="ConfigMap"), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"k": "v"}, "binaryData": {"bin": "AP8="}, "immutable": False},
        id="configmap-data-binarydata-immutable-false-kept"),
    pytest.param(envelope(meta(ld(1, "s")) + entry(2, "token", "héllo ✓".encode())
                          + entry(4, "plain", "text") + ld(3, "example.com/x") + vi(5, 1),
                          kind="Secret"), {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"token": base64.b64encode("héllo ✓".encode()).decode()},
        "stringData": {"plain": "text"}, "type": "example.com/x", "immutable": True},
        id="secret-data-stringdata-type-immutable"),
    pytest.param(envelope(meta(ld(1, "ns1")) + ld(2, ld(1, "kubernetes")) + ld(3, ld(1, "")),
                          kind="Namespace"), {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"},
        "spec": {"finalizers": ["kubernetes"]}, "status": {}},
        id="namespace-spec-and-empty-status"),
    pytest.param(envelope(meta(ld(1, "sa")) + ld(2, ld(3, "tok") + ld(1, "Secret"))
                          + ld(3, ld(1, "pull")) + vi(4, 0), kind="ServiceAccount"), {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"},
        "secrets": [{"name": "tok", "kind": "Secret"}], "imagePullSecrets": [{"name": "pull"}],
        "automountServiceAccountToken": False},
        id="serviceaccount-references-automount-false-kept"),
    pytest.param(envelope(meta(ld(1, "rb")) + ld(2, ld(1, "User") + ld(3, "u"))
                          + ld(3, ld(1, "rbac.authorization.k8s.io") + ld(2, "Role") + ld(3, "r")),
                          "rbac.authorization.k8s.io/v1", "RoleBinding"), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "rb"}, "subjects": [{"kind": "User", "name": "u"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}},
        id="rolebinding"),
    pytest.param(envelope(meta(ld(1, "cr")) + ld(3, ld(1, entry(1, "agg", "yes"))),
                          "rbac.authorization.k8s.io/v1", "ClusterRole"), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "cr"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}},
        id="clusterrole-aggregation"),
    pytest.param(envelope(vi(1, 0) + ld(2, ld(1, "uid-1")) + ld(4, "Foreground") + ld(5, "All"),
                          "v1", "DeleteOptions"), {
        "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
        "preconditions": {"uid": "uid-1"}, "propagationPolicy": "Foreground",
        "dryRun": ["All"]}, id="deleteoptions"),
    pytest.param(envelope(meta(ld(1, "c"), ld(99, "future field")) + ld(42, "x"),
                          api_version="", kind=""), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        id="endpoint-defaults-and-unknown-field-numbers-skipped"),
]


@pytest.mark.parametrize("body,expected", DECODED)
def test_decode(body, expected):
    assert protobuf.decode(body, "v1", "ConfigMap") == expected


MALFORMED = [
    pytest.param(b'{"kind": "ConfigMap"}', 400, "does not appear to be a protobuf message",
                 id="json-not-protobuf"),
    pytest.param(protobuf.MAGIC, 400, "empty body", id="magic-only"),
    pytest.param(protobuf.MAGIC + b"\xff\xff\xff", 400, "runtime.Unknown", id="envelope-garbage"),
    pytest.param(protobuf.MAGIC + ld(2, b"") + b"\x12\x80", 400, "runtime.Unknown",
                 id="envelope-truncated-length"),
    pytest.param(envelope(b"\x0a\x05\x0a", kind="ConfigMap"), 400, "ConfigMap v1",
                 id="object-truncated"),
    pytest.param(envelope(vi(1, 5), kind="ConfigMap"), 400, "wrong wire type 0 for field 1",
                 id="metadata-as-varint"),
    pytest.param(envelope(meta(vi(11, 1)), kind="ConfigMap"), 400, "ObjectMeta",
                 id="labels-as-varint"),
    pytest.param(envelope(meta(ld(1, b"\xff\xfe")), kind="ConfigMap"), 400, "UTF-8",
                 id="name-not-utf8"),
    pytest.param(envelope(entry(2, "k", b"\xc3"), kind="ConfigMap"), 400, "UTF-8",
                 id="map-value-not-utf8"),
    pytest.param(envelope(ld(2, ld(1, b"\xff") + ld(2, "v")), kind="ConfigMap"), 400, "UTF-8",
                 id="map-key-not-utf8"),
    pytest.param(envelope(meta(ld(17, ld(7, ld(1, "{not json")))), kind="ConfigMap"), 400,
                 "fieldsV1", id="fieldsv1-not-json"),
    pytest.param(envelope(meta(ld(9, vi(1, 1 << 62))), kind="ConfigMap"), 400,
                 "time out of range", id="timestamp-out-of-range"),
    pytest.param(protobuf.MAGIC + ld(1, ld(1, "v1") + ld(2, b"Config\xffMap")), 400,
                 "runtime.Unknown envelope", id="kind-not-utf8"),
    pytest.param(envelope(b"", "apps/v1", "Deployment"), 415,
                 "kubesim decodes protobuf only for", id="kind-without-message"),
    pytest.param(envelope(b"", "v2", "ConfigMap"), 415, "not ConfigMap v2",
                 id="unknown-version"),
]


@pytest.mark.parametrize("body,code,text", MALFORMED)
def test_decode_malformed(body, code, text):
    with pytest.raises(errors.ApiError) as info:
        protobuf.decode(body, "v1", "")
    assert info.value.code == code
    assert text in info.value.message


def test_mutated_bodies_decode_or_give_a_4xx():
    """Every truncation and many random byte changes of valid bodies: a JSON-serialisable
    object or an ApiError 400/415, never another exception (which would be a 500)."""
    rng = random.Random(7)
    bodies = [p.values[0] for p in DECODED]
    outcomes = set()
    for body in bodies:
        mutants = [body[:n] for n in range(len(body))]
        for _ in range(200):
            data = bytearray(body)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(protobuf.MAGIC), len(data))] = rng.randrange(256)
            mutants.append(bytes(data))
        for mutant in mutants:
            try:
                json.dumps(protobuf.decode(mutant, "v1", "ConfigMap"))
                outcomes.add("decoded")
            except errors.ApiError as exc:
                assert exc.code in (400, 415), (mutant, exc.message)
                outcomes.add(exc.code)
    assert outcomes == {"decoded", 400, 415}


def test_decode_without_any_kind_is_400():
    with pytest.raises(errors.ApiError) as info:
        protobuf.decode(envelope(b"", api_version="", kind=""))
    assert info.value.code == 400 and "Kind" in info.value.message


def test_encode_round_trip():
    body = protobuf.encode("Secret", {"metadata": {"name": "s", "labels": {"a": "b"}},
                                      "data": {"k": b"\x00\x01"}}, "v1", "Secret")
    assert body.startswith(protobuf.MAGIC)
    assert protobuf.decode(body) == {"apiVersion": "v1", "kind": "Secret",
                                     "metadata": {"name": "s", "labels": {"a": "b"}},
                                     "data": {"k": "AAE="}}


# -- over HTTP -----------------------------------------------------------------------------------
PROTOBUF = protobuf.MEDIA_TYPE


def test_http_create_update_delete_in_protobuf(kubesim_module, http):
    ns = make_namespace(kubesim_module, "pb")
    path = f"/api/v1/namespaces/{ns}/configmaps"
    body = envelope(meta(ld(1, "c"), ld(3, ns)) + entry(2, "k", "v"), kind="ConfigMap")
    code, created = http.post(path, body, content_type=PROTOBUF)
    assert code == 201, created
    assert created["data"] == {"k": "v"} and created["metadata"]["uid"]

    rv = created["metadata"]["resourceVersion"]
    body = envelope(meta(ld(1, "c"), ld(3, ns), ld(6, rv)) + entry(2, "k", "w"), kind="ConfigMap")
    code, updated = http.put(f"{path}/c", body, content_type=PROTOBUF)
    assert code == 200 and updated["data"] == {"k": "w"}, updated

    options = envelope(ld(2, ld(1, "wrong-uid")), "v1", "DeleteOptions")
    code, status = http.request("DELETE", f"{path}/c", options, PROTOBUF)
    assert_status(status, 409, "Conflict", "Precondition failed")
    options = envelope(ld(2, ld(1, created["metadata"]["uid"])), "v1", "DeleteOptions")
    code, _ = http.request("DELETE", f"{path}/c", options, PROTOBUF)
    assert code == 200
    assert kubesim_module.call(kubesim_module.api.store.get, "configmaps", ns, "c") is None


@pytest.mark.parametrize("body,code,reason", [
    (b"not protobuf at all", 400, "BadRequest"),
    (protobuf.MAGIC + b"\x0a\xff", 400, "BadRequest"),
    (envelope(b"\x0a", kind="ConfigMap"), 400, "BadRequest"),
    (envelope(b"", "v1", "Pod"), 415, "UnsupportedMediaType"),
])
def test_http_malformed_protobuf_is_a_clean_4xx(http, body, code, reason):
    status_code, status = http.post("/api/v1/namespaces/default/configmaps", body,
                                    content_type=PROTOBUF)
    assert status_code == code
    assert_status(status, code, reason)


def test_http_protobuf_for_a_custom_resource_is_415(kubesim_module, http):
    """Custom resources are served in JSON and YAML only, by kube-apiserver too."""
    crd = json.loads(json.dumps(WIDGET_CRD))
    if kubesim_module.call(kubesim_module.api.store.get,
                           "customresourcedefinitions.apiextensions.k8s.io", "",
                           crd["metadata"]["name"]) is None:
        kubesim_module.call(kubesim_module.api.create,
                            "customresourcedefinitions.apiextensions.k8s.io", crd)
    code, status = http.post(f"/apis/{WIDGET_GROUP}/v1/namespaces/default/widgets",
                             envelope(meta(ld(1, "w")), f"{WIDGET_GROUP}/v1", "Widget"),
                             content_type=PROTOBUF)
    assert code == 415
    assert_status(status, 415, "UnsupportedMediaType", "application/json")


def test_http_request_log_records_the_content_type(kubesim_module):
    http = Http(kubesim_module)
    kubesim_module.reset_metrics()
    http.post("/api/v1/namespaces", envelope(meta(ld(1, "pb-logged")), kind="Namespace"),
              content_type=PROTOBUF)
    http.get("/api/v1/namespaces/pb-logged")
    log = [(r["verb"], r["content_type"]) for r in kubesim_module.requests()]
    assert log == [("create", PROTOBUF), ("get", "")]
