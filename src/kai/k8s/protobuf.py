"""The Kubernetes protobuf encoding of the one object kai writes by the thousand.

A bind is a ``Binding`` POSTed to the pod's ``binding`` subresource, thousands a cycle.
The API server decodes a JSON body twice (once to find its kind, once strictly to
report unknown fields): with every bind in flight, that was 5% of its CPU, the resource
that bounds how fast a cluster binds.  A protobuf body is decoded once, at a fraction
of the cost, and kube-scheduler sends its bindings that way too.

The format (k8s.io/apimachinery's ``runtime.Unknown`` envelope behind a 4-byte magic,
the message inside it in protobuf wire format) is written by hand: the messages are
small and fixed, and no Python package ships the Kubernetes protobuf schema.  Answers
are still asked for in JSON.
"""

from __future__ import annotations

#: The content type of a protobuf body.
PROTOBUF = "application/vnd.kubernetes.protobuf"

#: Every protobuf-encoded Kubernetes object starts with these bytes.
MAGIC = b"k8s\x00"


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings and embedded messages."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode()) if value else b""


# The parts of a Binding that are the same in every bind.
_NODE_KIND = _text(1, "Node")
_V1 = _text(5, "v1")
_BINDING_TYPE = _field(1, _text(1, "v1") + _text(2, "Binding"))


def binding(namespace: str, name: str, node: str, uid: str | None = None) -> bytes:
    """The body of a bind of pod ``namespace/name`` to ``node`` (refused by the API
    server if ``uid`` is given and the pod of that name has another)."""
    # ObjectMeta: name 1, namespace 3, uid 5.
    meta = _text(1, name) + _text(3, namespace) + _text(5, uid or "")
    # ObjectReference: kind 1, name 3, apiVersion 5.
    target = _NODE_KIND + _text(3, node) + _V1
    # Binding: metadata 1, target 2.
    raw = _field(1, meta) + _field(2, target)
    # runtime.Unknown: typeMeta 1 (TypeMeta: apiVersion 1, kind 2), raw 2.
    return MAGIC + _BINDING_TYPE + _field(2, raw)
