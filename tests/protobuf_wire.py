"""Reading the protobuf bodies kai sends (``kai.k8s.protobuf``) in the test servers.

The ``Binding`` a body holds, in the JSON form the API server would see, read with kai's
wire-format reader (``read_fields``, which the e2e suite checks on the real API server's
answers).  The e2e suite also checks the real API server accepts the same bytes."""

from __future__ import annotations

from kai.k8s.protobuf import read_fields


def _wire_fields(data: bytes) -> dict[int, bytes]:
    """The length-delimited fields of one protobuf message (the last of each number)."""
    fields: dict[int, bytes] = {}
    for number, value in read_fields(data):
        if not isinstance(value, bytes):
            raise ValueError(f"field {number} of a binding is not length-delimited")
        fields[number] = value
    return fields


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
