"""Requests whose bytes are not a valid message answer INVALID_ARGUMENT, not UNKNOWN.

protobuf refuses a string field that is not valid UTF-8 (a lone surrogate is one:
it has no UTF-8 form, so it can only arrive as such bytes), and gRPC answers a
request it cannot deserialize with UNKNOWN. Here the services' handlers are built
with a deserializer that never raises: a bad payload becomes an `UndecodableRequest`
naming the bad field, which the handler answers with INVALID_ARGUMENT and a
BadRequest before the servicer sees it.

The field is found by parsing the payload again as a "twin" of the request type
whose string fields are bytes fields (same numbers, so the same wire format), then
looking for the value that is not UTF-8.

A batch request (AIP-233: its one field a repeated message, as BatchEnqueueRequest's
`requests`) is not refused for one bad item: its items are read one by one, and it
becomes a `PartlyDecodedBatch`, the good items in place and each bad one named, so
that the servicer answers the bad ones alone ("one bad item never fails the batch").
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.transport.errors import bad_request

_TWIN_PACKAGE_SUFFIX = ".undecodable"


@dataclass(frozen=True, slots=True)
class UndecodableRequest:
    """What the lenient deserializer gives for bytes that are not a valid request."""

    violation: FieldViolation


@dataclass(frozen=True, slots=True)
class PartlyDecodedBatch:
    """A batch request with items that are not valid messages: `request` holds every
    item, an empty message in place of each bad one; `undecodable` maps a bad item's
    index to its violation (the field path within the item)."""

    request: Message
    undecodable: dict[int, FieldViolation]


@functools.cache
def _twin_pool(file_name: str) -> descriptor_pool.DescriptorPool:
    """A pool holding a copy of `file_name` (and its imports) with every string field
    turned into a bytes field, in a package of its own."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: Any, rename: bool) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency, rename=False)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        if rename:
            del proto.service[:]  # its methods name the original types
            proto.package += _TWIN_PACKAGE_SUFFIX
            _strings_to_bytes(proto.message_type, file.package, proto.package)
        pool.Add(proto)
        added.add(file.name)

    add(descriptor_pool.Default().FindFileByName(file_name), rename=True)
    return pool


def _strings_to_bytes(messages: Any, package: str, twin_package: str) -> None:
    for message in messages:
        for field in message.field:
            if field.type == FieldDescriptor.TYPE_STRING:
                field.type = FieldDescriptor.TYPE_BYTES
            elif field.type_name.startswith(f".{package}."):
                field.type_name = f".{twin_package}{field.type_name[len(package) + 1 :]}"
        _strings_to_bytes(message.nested_type, package, twin_package)


def _bad_utf8_field(descriptor: Any, data: bytes) -> str | None:
    """The path of the first string field of `data` (a `descriptor` message) that is
    not UTF-8, or None when the payload is broken in another way."""
    pool = _twin_pool(descriptor.file.name)
    twin_name = descriptor.full_name.replace(
        descriptor.file.package, descriptor.file.package + _TWIN_PACKAGE_SUFFIX, 1
    )
    twin_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(twin_name))
    try:
        twin = twin_class.FromString(data)
    except DecodeError:
        return None
    return _find_bad_utf8(descriptor, twin, "")


def _find_bad_utf8(descriptor: Any, twin: Message, prefix: str) -> str | None:
    for twin_field, value in twin.ListFields():
        field = descriptor.fields_by_number[twin_field.number]
        path = prefix + field.name
        items = list(value) if twin_field.is_repeated else [value]
        for index, item in enumerate(items):
            item_path = f"{path}[{index}]" if twin_field.is_repeated else path
            if field.type == FieldDescriptor.TYPE_STRING:
                try:
                    item.decode("utf-8")
                except UnicodeDecodeError:
                    return item_path
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                found = _find_bad_utf8(field.message_type, item, item_path + ".")
                if found is not None:
                    return found
    return None


def _batch_items_field(descriptor: Any) -> Any | None:
    """The items field of a batch request (its only field, a repeated message), else None."""
    if len(descriptor.fields) != 1:
        return None
    (field,) = descriptor.fields
    if field.is_repeated and field.type == FieldDescriptor.TYPE_MESSAGE:
        return field
    return None


@functools.cache
def _raw_items_class(descriptor: Any) -> type[Message]:
    """A message of one field, `repeated bytes`, numbered as `descriptor`'s items
    field: the same wire format, each item left as its bytes."""
    items = _batch_items_field(descriptor)
    assert items is not None, descriptor.full_name  # only called for a batch request
    file = descriptor_pb2.FileDescriptorProto(
        name=f"raw_items/{descriptor.full_name}.proto", package="raw_items", syntax="proto3"
    )
    message = file.message_type.add(name="RawItems")
    message.field.add(
        name=items.name,
        number=items.number,
        type=FieldDescriptor.TYPE_BYTES,
        label=FieldDescriptor.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("raw_items.RawItems"))


def _item_by_item(
    message_class: type[Message], items: Any, data: bytes
) -> PartlyDecodedBatch | None:
    """The batch `data` read item by item (None: not even its items can be told apart)."""
    try:
        raw = _raw_items_class(message_class.DESCRIPTOR).FromString(data)
    except DecodeError:
        return None
    item_class = message_factory.GetMessageClass(items.message_type)
    decoded: list[Message] = []
    undecodable: dict[int, FieldViolation] = {}
    for index, item_bytes in enumerate(getattr(raw, items.name)):
        try:
            item = item_class.FromString(item_bytes)
        except DecodeError:
            item = item_class()
            undecodable[index] = _violation(items.message_type, item_bytes)
        decoded.append(item)
    request = message_class()
    getattr(request, items.name).extend(decoded)
    return PartlyDecodedBatch(request, undecodable)


def _violation(descriptor: Any, data: bytes) -> FieldViolation:
    field = _bad_utf8_field(descriptor, data)
    if field is None:
        return FieldViolation("request", f"is not a valid {descriptor.full_name} message")
    return FieldViolation(field, "is not valid UTF-8 (a lone surrogate, or bad bytes)")


def lenient_deserializer(
    message_class: type[Message],
) -> Callable[[bytes], Message | UndecodableRequest | PartlyDecodedBatch]:
    """`message_class.FromString`, giving an UndecodableRequest instead of raising
    (for a batch request with bad items, a PartlyDecodedBatch)."""
    descriptor = message_class.DESCRIPTOR
    items = _batch_items_field(descriptor)

    def deserialize(data: bytes) -> Message | UndecodableRequest | PartlyDecodedBatch:
        try:
            return message_class.FromString(data)
        except DecodeError:
            if items is not None:
                partly = _item_by_item(message_class, items, data)
                if partly is not None:
                    return partly
            return UndecodableRequest(_violation(descriptor, data))

    return deserialize


async def _refuse(request: UndecodableRequest, context: Any) -> None:
    await context.abort_with_status(bad_request([request.violation]))


def _unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, UndecodableRequest):
            await _refuse(request, context)
        return await behavior(request, context)

    return handle


def _server_streaming(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        if isinstance(request, UndecodableRequest):
            await _refuse(request, context)
            return
        async for response in behavior(request, context):
            yield response

    return handle


def add_lenient_service(
    servicer: object, service: ServiceDescriptor, server: grpc.aio.Server
) -> None:
    """Register `servicer`'s methods of `service` (unary and server-streaming ones)
    on `server`, as the generated add_*_to_server does, with lenient deserializers."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        options: dict[str, Any] = {
            "request_deserializer": lenient_deserializer(request_class),
            "response_serializer": response_class.SerializeToString,
        }
        if method.client_streaming:
            raise ValueError(f"{method.full_name}: client streaming is not supported here")
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _server_streaming(behavior), **options
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(_unary(behavior), **options)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)  # type: ignore[attr-defined]
