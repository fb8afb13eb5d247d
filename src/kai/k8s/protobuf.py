"""The Kubernetes protobuf encoding of the one object kai writes by the thousand.

A bind is a ``Binding`` POSTed to the pod's ``binding`` subresource, thousands a cycle.
The API server decodes a JSON body twice (once to find its kind, once strictly to
report unknown fields): with every bind in flight, that was 5% of its CPU, the resource
that bounds how fast a cluster binds.  A protobuf body is decoded once, at a fraction
of the cost, and kube-scheduler sends its bindings that way too.

The format (k8s.io/apimachinery's ``runtime.Unknown`` envelope behind a 4-byte magic,
the message inside it in protobuf wire format) is written by hand: the messages are
small and fixed, and no Python package ships the Kubernetes protobuf schema.

The answer to a bind is a ``Status``, which the API server encodes in JSON by
reflection: 3% of its CPU under kai's binds.  Pipelined binds ask for it in protobuf, as
kube-scheduler's do: a success needs no reading, and a refusal is read back into its
JSON form (:func:`status_json`), which error reports and the conflict check read.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

#: The content type of a protobuf body.
PROTOBUF = "application/vnd.kubernetes.protobuf"

#: Every protobuf-encoded Kubernetes object starts with these bytes.
MAGIC = b"k8s\x00"

#: The Accept header of a write whose answer is read only when it is a refusal:
#: protobuf, or JSON from a server that has no protobuf form of it.
PROTOBUF_OR_JSON = f"{PROTOBUF}, application/json"


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


# ---------------------------------------------------------------------- reading


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def read_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """The (number, value) of each field of one message: an int for a varint, bytes
    for a length-delimited field; fixed-width fields are skipped."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        wire = key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
            yield key >> 3, value
        elif wire == 2:
            size, i = _read_varint(data, i)
            if i + size > len(data):
                raise ValueError("a field runs past the end of its message")
            yield key >> 3, data[i : i + size]
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")


def _int32(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value  # negatives are 10 bytes


def _message(data: bytes, names: dict[int, str], ints: frozenset[int] = frozenset()) -> dict:
    out: dict = {}
    for number, value in read_fields(data):
        name = names.get(number)
        if name is None or not value:
            continue  # JSON leaves out empty strings and zeros (omitempty)
        if number in ints and isinstance(value, int):
            out[name] = _int32(value)
        elif isinstance(value, bytes):
            out[name] = value.decode()
    return out


def status(data: bytes) -> dict:
    """A protobuf ``Status`` (runtime.Unknown envelope) in its JSON form; ValueError for
    anything else."""
    if not data.startswith(MAGIC):
        raise ValueError("no protobuf magic")
    envelope = {n: v for n, v in read_fields(data[4:]) if isinstance(v, bytes)}
    kind = _message(envelope.get(1, b""), {1: "apiVersion", 2: "kind"})
    if kind.get("kind") != "Status":
        raise ValueError(f"a {kind.get('kind')!r}, not a Status")
    raw = envelope.get(2, b"")
    # Status: metadata 1, status 2, message 3, reason 4, details 5, code 6.
    out: dict = {
        "kind": "Status",
        "apiVersion": kind.get("apiVersion", "v1"),
        "metadata": {},
        **_message(raw, {2: "status", 3: "message", 4: "reason", 6: "code"}, frozenset({6})),
    }
    for number, value in read_fields(raw):
        if number == 5 and isinstance(value, bytes) and value:
            # StatusDetails: name 1, group 2, kind 3, causes 4, retryAfterSeconds 5, uid 6.
            details = _message(
                value,
                {1: "name", 2: "group", 3: "kind", 5: "retryAfterSeconds", 6: "uid"},
                frozenset({5}),
            )
            causes = [
                _message(cause, {1: "reason", 2: "message", 3: "field"})
                for n, cause in read_fields(value)
                if n == 4 and isinstance(cause, bytes)
            ]
            if causes:
                details["causes"] = causes
            out["details"] = details
    return out


def status_json(data: bytes) -> bytes:
    """:func:`status` as JSON bytes; the bytes as they are when they are no Status."""
    try:
        return orjson.dumps(status(data))
    except (ValueError, IndexError, UnicodeDecodeError):
        return data
