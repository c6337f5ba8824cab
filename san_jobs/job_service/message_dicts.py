"""Protobuf messages <-> JSON objects (dicts), fast: how JobService stores a job's
input and result, and how it builds a gateway request from a stored input. Both the
API's conversions (transport/convert.py) and the gateway adapter (gateway_client.py)
use it; neither imports the other.

Hot path (every Enqueue, every gateway call and every stream message): messages are
built field by field through their constructors. `json_format` walks descriptors in
Python and costs several times more; `message_from_dict` / `message_to_dict` give the
same results as `ParseDict(ignore_unknown_fields=True)` / `MessageToDict(
preserving_proto_field_name=True)` for the plain messages the jobs carry, and fall
back to json_format for anything else (JSON names, well-known types, enums, maps, odd
values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal.type_checkers import ToShortestFloat
from google.protobuf.message import Message

MessageT = TypeVar("MessageT", bound=Message)

# Field kinds the fast paths handle; any other field makes a message go through json_format.
_SCALAR = "scalar"  # string, bool, 32-bit integers: the same value in a dict and a message
_FLOAT = "float"  # float32: MessageToDict prints the shortest decimal that round-trips
_DOUBLE = "double"
_MESSAGE = "message"
_SCALAR_TYPES = {
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_FIXED32,
}
_WELL_KNOWN_PREFIX = "google.protobuf."

# Any other field (int64, enums, maps, well-known types, ...): a message that holds
# one goes through json_format; one that leaves it unset still takes the fast path
# (the gateway's answers carry an int64/Duration `usage`, cleared before they are dumped).
_OTHER = "other"

# descriptor full name -> {field name: (kind, repeated, message class)}; None while
# being built (a self-referencing message: its own fields of that type are _OTHER).
_PLAIN: dict[str, dict[str, tuple[str, bool, Any]] | None] = {}


def _plain_fields(descriptor: Any) -> dict[str, tuple[str, bool, Any]] | None:
    """Each field's kind for the fast paths (recursively); None only while it is built."""
    name = descriptor.full_name
    if name in _PLAIN:
        return _PLAIN[name]
    _PLAIN[name] = None  # recursion guard: a self-referencing field is _OTHER
    fields: dict[str, tuple[str, bool, Any]] = {}
    for field in descriptor.fields:
        repeated = field.is_repeated
        if field.type in _SCALAR_TYPES:
            kind, sub = _SCALAR, None
        elif field.type == FieldDescriptor.TYPE_FLOAT:
            kind, sub = _FLOAT, None
        elif field.type == FieldDescriptor.TYPE_DOUBLE:
            kind, sub = _DOUBLE, None
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.GetOptions().map_entry
            and not field.message_type.full_name.startswith(_WELL_KNOWN_PREFIX)
            and _plain_fields(field.message_type) is not None
        ):
            kind, sub = _MESSAGE, message_factory.GetMessageClass(field.message_type)
        else:
            kind, sub = _OTHER, None
        fields[field.name] = (kind, repeated, sub)
    _PLAIN[name] = fields
    return fields


class _NotPlain(Exception):
    """The fast path does not cover this value: use json_format."""


def _build(message_type: type[MessageT], data: Mapping[str, Any]) -> MessageT:
    fields = _plain_fields(message_type.DESCRIPTOR)
    if fields is None or not isinstance(data, Mapping):
        raise _NotPlain
    values: dict[str, Any] = {}
    for key, value in data.items():
        spec = fields.get(key)
        if spec is None or spec[0] == _OTHER:
            raise _NotPlain  # unknown, a JSON (lowerCamel) name, or odd: json_format decides
        if value is not None:  # JSON null: the field's default
            values[key] = _field_value(spec, value)
    try:
        return message_type(**values)
    except (TypeError, ValueError) as error:  # e.g. an int out of int32 range
        raise _NotPlain from error


def _field_value(spec: tuple[str, bool, Any], value: Any) -> Any:
    kind, repeated, sub = spec
    if repeated and not isinstance(value, list):
        raise _NotPlain
    items = value if repeated else [value]
    if kind == _MESSAGE:
        built = [_build(sub, item) for item in items]
        return built if repeated else built[0]
    # A message constructor is stricter than ParseDict for some values (an int given
    # as 5.0 or "5", a float as "NaN"), looser for none: exact types only.
    odd = _odd_scalar if kind == _SCALAR else _odd_float
    if any(odd(v) for v in items):
        raise _NotPlain
    return value


def _odd_scalar(value: Any) -> bool:
    return not isinstance(value, str | bool | int)


def _odd_float(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)


def message_from_dict(message_type: type[MessageT], data: Mapping[str, Any]) -> MessageT:
    """`json_format.ParseDict(data, message_type(), ignore_unknown_fields=True)`, fast."""
    try:
        return _build(message_type, data)
    except _NotPlain:
        return json_format.ParseDict(dict(data), message_type(), ignore_unknown_fields=True)


def _dump(message: Message) -> dict[str, Any]:
    fields = _plain_fields(message.DESCRIPTOR)
    if fields is None:
        raise _NotPlain
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        kind, repeated, _ = fields[field.name]
        if kind == _OTHER:
            raise _NotPlain
        if kind == _SCALAR:
            out[field.name] = list(value) if repeated else value
        elif kind == _MESSAGE:
            out[field.name] = [_dump(v) for v in value] if repeated else _dump(value)
        else:
            items = list(value) if repeated else [value]
            if not all(math.isfinite(v) for v in items):
                raise _NotPlain  # NaN and infinities are strings in JSON
            if kind == _FLOAT:
                items = [_shortest_float(v) for v in items]
            out[field.name] = items if repeated else items[0]
    return out


def _shortest_float(value: float) -> float:
    """ToShortestFloat (what MessageToDict prints for a float32), with its answer for
    whole numbers below 2**24 (exact in float32: the number itself) given at once."""
    if value.is_integer() and -16_777_216.0 < value < 16_777_216.0:
        return value
    return float(ToShortestFloat(value))


def message_to_dict(message: Message) -> dict[str, Any]:
    """`json_format.MessageToDict(message, preserving_proto_field_name=True)`, fast."""
    try:
        return _dump(message)
    except _NotPlain:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)
