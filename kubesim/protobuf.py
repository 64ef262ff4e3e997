"""Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`).

client-go's generated clients for built-in kinds send protobuf whenever the caller did not
choose a content type (gentype's `PrefersProtobuf`, `rest.Request.UseProtobufAsDefault`), and
they do not fall back to JSON on a 415. kubectl's imperative commands use those clients:
`kubectl create namespace|configmap|secret|serviceaccount|role|...`. A real kube-apiserver
decodes protobuf for every built-in kind (custom resources answer 415), so kubesim decodes
the kinds in `KINDS` and answers a clear 415 for the others.

The wire format (k8s.io/apimachinery/pkg/runtime/serializer/protobuf): the 4-byte magic
`k8s\\x00`, then a `runtime.Unknown` message {typeMeta {apiVersion, kind}, raw,
contentEncoding, contentType} whose `raw` is the object's own message. The `protobuf` package
decodes the bytes, from message descriptors built at run time from `MESSAGES`; this module
turns the decoded messages into the JSON objects the rest of kubesim works on, following the
Go types' JSON encoding (`MESSAGES` records each field's Go type for that).
"""
from __future__ import annotations

import base64
import datetime
import functools
import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from kubesim import errors

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"  # k8s.io/apimachinery/pkg/runtime/serializer/protobuf protoEncodingPrefix
_PACKAGE = "kubesim.k8s"

# Message name -> {JSON field name: (field number in generated.proto, Go type)}. Field names
# and numbers are those of k8s.io/api and k8s.io/apimachinery's generated.proto files (the
# protobuf field name is the JSON name). The Go type drives the JSON form: "string", "int32",
# "int64", "bool" and "bytes" are omitted when zero (Go's `omitempty`; a required scalar sent
# as its zero value therefore reads as absent), "*T" is a pointer (kept even when zero),
# "[]T" a list, "map[string]T" a map, any other name a message (kept even when empty, like a
# Go struct); "Time" and "FieldsV1" have JSON forms of their own (see _SPECIAL).
MESSAGES: dict[str, dict[str, tuple[int, str]]] = {
    # k8s.io/apimachinery/pkg/runtime
    "Unknown": {"typeMeta": (1, "TypeMeta"), "raw": (2, "bytes"),
                "contentEncoding": (3, "string"), "contentType": (4, "string")},
    "TypeMeta": {"apiVersion": (1, "string"), "kind": (2, "string")},
    # k8s.io/apimachinery/pkg/apis/meta/v1
    "Time": {"seconds": (1, "int64"), "nanos": (2, "int32")},
    "FieldsV1": {"Raw": (1, "bytes")},
    "ObjectMeta": {
        "name": (1, "string"), "generateName": (2, "string"), "namespace": (3, "string"),
        "selfLink": (4, "string"), "uid": (5, "string"), "resourceVersion": (6, "string"),
        "generation": (7, "int64"), "creationTimestamp": (8, "Time"),
        "deletionTimestamp": (9, "*Time"), "deletionGracePeriodSeconds": (10, "*int64"),
        "labels": (11, "map[string]string"), "annotations": (12, "map[string]string"),
        "ownerReferences": (13, "[]OwnerReference"), "finalizers": (14, "[]string"),
        "managedFields": (17, "[]ManagedFieldsEntry"),
    },
    "OwnerReference": {
        "apiVersion": (5, "string"), "kind": (1, "string"), "name": (3, "string"),
        "uid": (4, "string"), "controller": (6, "*bool"), "blockOwnerDeletion": (7, "*bool"),
    },
    "ManagedFieldsEntry": {
        "manager": (1, "string"), "operation": (2, "string"), "apiVersion": (3, "string"),
        "time": (4, "*Time"), "fieldsType": (6, "string"), "fieldsV1": (7, "*FieldsV1"),
        "subresource": (8, "string"),
    },
    "LabelSelector": {"matchLabels": (1, "map[string]string"),
                      "matchExpressions": (2, "[]LabelSelectorRequirement")},
    "LabelSelectorRequirement": {"key": (1, "string"), "operator": (2, "string"),
                                 "values": (3, "[]string")},
    "DeleteOptions": {
        "gracePeriodSeconds": (1, "*int64"), "preconditions": (2, "*Preconditions"),
        "orphanDependents": (3, "*bool"), "propagationPolicy": (4, "*string"),
        "dryRun": (5, "[]string"), "ignoreStoreReadErrorWithClusterBreakingPotential": (6, "*bool"),
    },
    "Preconditions": {"uid": (1, "*string"), "resourceVersion": (2, "*string")},
    # k8s.io/api/core/v1
    "Namespace": {"metadata": (1, "ObjectMeta"), "spec": (2, "NamespaceSpec"),
                  "status": (3, "NamespaceStatus")},
    "NamespaceSpec": {"finalizers": (1, "[]string")},
    "NamespaceStatus": {"phase": (1, "string"), "conditions": (2, "[]NamespaceCondition")},
    "NamespaceCondition": {"type": (1, "string"), "status": (2, "string"),
                           "lastTransitionTime": (4, "Time"), "reason": (5, "string"),
                           "message": (6, "string")},
    "ConfigMap": {"metadata": (1, "ObjectMeta"), "immutable": (4, "*bool"),
                  "data": (2, "map[string]string"), "binaryData": (3, "map[string]bytes")},
    "Secret": {"metadata": (1, "ObjectMeta"), "immutable": (5, "*bool"),
               "data": (2, "map[string]bytes"), "stringData": (4, "map[string]string"),
               "type": (3, "string")},
    "ServiceAccount": {"metadata": (1, "ObjectMeta"), "secrets": (2, "[]ObjectReference"),
                       "imagePullSecrets": (3, "[]LocalObjectReference"),
                       "automountServiceAccountToken": (4, "*bool")},
    "ObjectReference": {"kind": (1, "string"), "namespace": (2, "string"), "name": (3, "string"),
                        "uid": (4, "string"), "apiVersion": (5, "string"),
                        "resourceVersion": (6, "string"), "fieldPath": (7, "string")},
    "LocalObjectReference": {"name": (1, "string")},
    # k8s.io/api/rbac/v1
    "Role": {"metadata": (1, "ObjectMeta"), "rules": (2, "[]PolicyRule")},
    "ClusterRole": {"metadata": (1, "ObjectMeta"), "rules": (2, "[]PolicyRule"),
                    "aggregationRule": (3, "*AggregationRule")},
    "RoleBinding": {"metadata": (1, "ObjectMeta"), "subjects": (2, "[]Subject"),
                    "roleRef": (3, "RoleRef")},
    "ClusterRoleBinding": {"metadata": (1, "ObjectMeta"), "subjects": (2, "[]Subject"),
                           "roleRef": (3, "RoleRef")},
    "PolicyRule": {"verbs": (1, "[]string"), "apiGroups": (2, "[]string"),
                   "resources": (3, "[]string"), "resourceNames": (4, "[]string"),
                   "nonResourceURLs": (5, "[]string")},
    "AggregationRule": {"clusterRoleSelectors": (1, "[]LabelSelector")},
    "RoleRef": {"apiGroup": (1, "string"), "kind": (2, "string"), "name": (3, "string")},
    "Subject": {"kind": (1, "string"), "apiGroup": (2, "string"), "name": (3, "string"),
                "namespace": (4, "string")},
}

_RBAC = "rbac.authorization.k8s.io/v1"
# (apiVersion, kind) -> message of the object. DeleteOptions (a DELETE's body) is accepted
# under any apiVersion: clients encode it in the version of the resource they delete.
KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace", ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret", ("v1", "ServiceAccount"): "ServiceAccount",
    (_RBAC, "Role"): "Role", (_RBAC, "ClusterRole"): "ClusterRole",
    (_RBAC, "RoleBinding"): "RoleBinding", (_RBAC, "ClusterRoleBinding"): "ClusterRoleBinding",
}
_ANY_VERSION_KINDS = {"DeleteOptions"}

_SCALARS = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}


def _parse_type(go_type: str) -> tuple[str, str]:
    """("scalar" | "pointer" | "list" | "map", element type) of a Go type in MESSAGES."""
    if go_type.startswith("*"):
        return "pointer", go_type[1:]
    if go_type.startswith("[]"):
        return "list", go_type[2:]
    if go_type.startswith("map[string]"):
        return "map", go_type[len("map[string]"):]
    return "scalar", go_type


# -- descriptors -------------------------------------------------------------------------------
def _set_type(field: descriptor_pb2.FieldDescriptorProto, elem: str) -> None:
    if elem in _SCALARS:
        field.type = _SCALARS[elem]
    else:
        field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
        field.type_name = f".{_PACKAGE}.{elem}"


def _add_field(msg: descriptor_pb2.DescriptorProto, name: str, number: int, go_type: str) -> None:
    shape, elem = _parse_type(go_type)
    field = msg.field.add(name=name, number=number, json_name=name)
    field.label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if shape in ("list", "map")
                   else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    if shape != "map":
        _set_type(field, elem)
        return
    entry = msg.nested_type.add(name=name[0].upper() + name[1:] + "Entry")
    entry.options.map_entry = True
    _add_field(entry, "key", 1, "string")
    _add_field(entry, "value", 2, elem)
    field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
    field.type_name = f".{_PACKAGE}.{msg.name}.{entry.name}"


@functools.lru_cache(maxsize=None)
def _pool() -> descriptor_pool.DescriptorPool:
    """A descriptor pool with every message of MESSAGES (proto2, like generated.proto)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="kubesim/k8s.proto", package=_PACKAGE,
                                             syntax="proto2")
    for name, fields in MESSAGES.items():
        msg = fdp.message_type.add(name=name)
        for field_name, (number, go_type) in fields.items():
            _add_field(msg, field_name, number, go_type)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


@functools.lru_cache(maxsize=None)
def message_class(name: str) -> type[Message]:
    """The generated Python class of the message `name` (a key of MESSAGES)."""
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(f"{_PACKAGE}.{name}"))


# -- messages -> JSON ------------------------------------------------------------------------
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _time(msg: Message) -> str | None:
    """metav1.Time: RFC 3339 in UTC, whole seconds; an empty message is the zero time (null)."""
    if not msg.ListFields():
        return None
    try:
        moment = _EPOCH + datetime.timedelta(seconds=msg.seconds)
    except OverflowError:
        raise errors.bad_request(f"time out of range: {msg.seconds} seconds") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields_v1(msg: Message) -> Any:
    """metav1.FieldsV1: its raw bytes are the JSON object itself."""
    try:
        return json.loads(msg.Raw) if msg.Raw else None
    except (ValueError, UnicodeDecodeError):
        raise errors.bad_request("fieldsV1 is not valid JSON") from None


_SPECIAL = {"Time": _time, "FieldsV1": _fields_v1}


def _text(value: str | bytes) -> str:
    """A protobuf string. proto2 does not check UTF-8: the library hands over invalid text as
    bytes (or raises UnicodeDecodeError for map keys), which `decode` answers with a 400."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _value(elem: str, value: Any) -> Any:
    """The JSON form of one decoded value whose Go type is `elem` (no pointer, list or map)."""
    if elem == "string":
        return _text(value)
    if elem in _SPECIAL:
        return _SPECIAL[elem](value)
    if elem in MESSAGES:
        return to_json(elem, value)
    if elem == "bytes":
        return base64.b64encode(value).decode("ascii")
    return value


def _is_zero(elem: str, value: Any) -> bool:
    return elem in _SCALARS and not value


def _check_wire_types(name: str, msg: Message) -> None:
    """The library keeps a known field sent with the wrong wire type as an unknown field; the
    Go decoder rejects it ("wrong wireType"), and so does kubesim. Unknown numbers are skipped
    by both."""
    numbers = {number for number, _ in MESSAGES[name].values()}
    for field in UnknownFieldSet(msg):
        if field.field_number in numbers:
            raise errors.bad_request(f"unable to decode {name} from protobuf: wrong wire type "
                                     f"{field.wire_type} for field {field.field_number}")


def to_json(name: str, msg: Message) -> dict[str, Any]:
    """The JSON object of a decoded message `name`, as Go's encoding/json writes the struct."""
    _check_wire_types(name, msg)
    fields = MESSAGES[name]
    out: dict[str, Any] = {}
    for descriptor, value in msg.ListFields():
        shape, elem = _parse_type(fields[descriptor.name][1])
        if shape == "list":
            converted: Any = [_value(elem, v) for v in value]
        elif shape == "map":
            converted = {k: _value(elem, v) for k, v in value.items()}
        elif shape == "scalar" and _is_zero(elem, value):
            continue
        else:
            converted = _value(elem, value)
        if converted is not None:
            out[descriptor.name] = converted
    return out


# -- the envelope --------------------------------------------------------------------------------
def _parse(name: str, data: bytes, what: str) -> Message:
    try:
        return message_class(name).FromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise errors.bad_request(f"unable to decode {what} from protobuf: {exc}") from None


def _to_json(name: str, msg: Message, what: str) -> dict[str, Any]:
    try:
        return to_json(name, msg)
    except UnicodeDecodeError:
        raise errors.bad_request(f"unable to decode {what} from protobuf: a string field is "
                                 f"not valid UTF-8") from None


def _message_for(api_version: str, kind: str) -> str:
    name = KINDS.get((api_version, kind)) or (kind if kind in _ANY_VERSION_KINDS else None)
    if name is None:
        known = ", ".join(sorted(k for _, k in KINDS) + sorted(_ANY_VERSION_KINDS))
        raise errors.ApiError(
            415, f"the body of the request was in an unknown format ({MEDIA_TYPE}) - kubesim "
                 f"decodes protobuf only for {known}, not {kind} {api_version}: send "
                 f"application/json", "UnsupportedMediaType")
    return name


def decode(body: bytes, api_version: str = "", kind: str = "") -> dict[str, Any]:
    """The JSON object of a protobuf request body. `api_version` and `kind` (the endpoint's)
    stand in for those the envelope leaves empty, as kube-apiserver's decoder defaults them.
    Raises ApiError: 400 for a body that is not a well-formed protobuf envelope or message,
    415 for a kind this module has no message for."""
    if not body.startswith(MAGIC):
        raise errors.bad_request(f"provided data does not appear to be a protobuf message, "
                                 f"expected prefix {list(MAGIC)}")
    if len(body) == len(MAGIC):
        raise errors.bad_request("empty body")
    envelope = _parse("Unknown", body[len(MAGIC):], "the runtime.Unknown envelope")
    type_meta = _to_json("TypeMeta", envelope.typeMeta, "the runtime.Unknown envelope")
    api_version = type_meta.get("apiVersion") or api_version
    kind = type_meta.get("kind") or kind
    if not kind:
        raise errors.bad_request("Object 'Kind' is missing in the protobuf envelope")
    if not api_version:
        raise errors.bad_request("Object 'apiVersion' is missing in the protobuf envelope")
    name = _message_for(api_version, kind)
    what = f"{kind} {api_version}"
    return {"apiVersion": api_version, "kind": kind,
            **_to_json(name, _parse(name, envelope.raw, what), what)}


def encode(name: str, fields: dict[str, Any], api_version: str, kind: str) -> bytes:
    """A protobuf body as client-go writes it: the message `name` built from `fields` (the
    protobuf library's keyword form, e.g. bytes as bytes), inside the envelope. For tests."""
    raw = message_class(name)(**fields).SerializeToString()
    envelope = message_class("Unknown")(typeMeta={"apiVersion": api_version, "kind": kind},
                                        raw=raw)
    return MAGIC + envelope.SerializeToString()
