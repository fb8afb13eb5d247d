"""Reading the protobuf bodies kai sends (``kai.k8s.protobuf``) in the test servers.

A generic wire-format reader of length-delimited fields, and the ``Binding`` it makes
of one, in the JSON form the API server would see.  The e2e suite checks the real API
server accepts the same bytes."""

from __future__ import annotations


def _wire_fields(data: bytes) -> dict[int, bytes]:
    """The length-delimited fields of one protobuf message (the last of each number)."""
    fields: dict[int, bytes] = {}
    i = 0
    while i < len(data):
        key, i = _wire_varint(data, i)
        if key & 7 != 2:
            raise ValueError(f"wire type {key & 7} in a binding")
        size, i = _wire_varint(data, i)
        fields[key >> 3] = data[i : i + size]
        i += size
    return fields


def _wire_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def binding_from_protobuf(raw: bytes) -> dict:
    """A protobuf ``Binding`` (runtime.Unknown envelope) as its JSON form."""
    if not raw.startswith(b"k8s\x00"):
        raise ValueError("no protobuf magic")
    unknown = _wire_fields(raw[4:])
    type_meta = _wire_fields(unknown[1])
    binding = _wire_fields(unknown[2])
    meta, target = _wire_fields(binding[1]), _wire_fields(binding[2])
    names = {
        "metadata": {1: "name", 3: "namespace", 5: "uid"},
        "target": {1: "kind", 3: "name", 5: "apiVersion"},
    }
    return {
        "apiVersion": type_meta[1].decode(),
        "kind": type_meta[2].decode(),
        "metadata": {names["metadata"][k]: v.decode() for k, v in meta.items()},
        "target": {names["target"][k]: v.decode() for k, v in target.items()},
    }
