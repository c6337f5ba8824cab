"""The clients' results: the service's messages, with enum fields that print as names.

A generated message gives an enum field as a bare number (``job.status`` is ``3``),
and its class cannot be subclassed. So a result that holds an enum field, itself or
in a message under it (a ``Job``, an ``EnqueueResponse``, ``GetJobStatsResponse``,
...), is handed out as a view of its message: reading a field gives what the message
gives, except that an enum field is its :mod:`~san_jobs.client._names` enum member
(``job.status`` prints ``JOB_STATUS_COMPLETED`` and still equals ``3``), and a message
or a list of messages holding enums is a view too. Everything else is the message's
own: ``HasField``, ``WhichOneof``, ``ListFields``, ``SerializeToString``, ``str()``
(the text format), ``==``, ``isinstance(job, pb.Job)``, ``MessageToDict(job)``,
setting a field. A result without enums (``RetryFailedResponse``, a job's result
message, its timestamps) is the message itself.

What needs the message object as such (``other.CopyFrom(job)``, ``pb.X(job=job)``,
``repeated.append(job)``) takes :func:`as_message` of it. Type checkers see a result
as the generated message (its ``.pyi``): ``job.status`` is a
``pb.JobStatus.ValueType``, which the enum member is, a number.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Any, TypeVar, cast

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from san_jobs.client._names import CONTRACT_ENUMS, ContractEnum

M = TypeVar("M", bound=Message)

Wrap = Callable[[Any], Any]


def _enum_value(enum: type[ContractEnum]) -> Wrap:
    def wrap(number: int) -> int:
        try:
            return enum(number)
        except ValueError:  # a number this contract does not know (a newer server)
            return number

    return wrap


def _holds_enum(descriptor: Any, seen: frozenset[str] = frozenset()) -> bool:
    """True when a message type has a contract enum field, itself or below."""
    if descriptor.full_name in seen:
        return False
    inner = seen | {descriptor.full_name}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type.full_name in CONTRACT_ENUMS:
            return True
        if field.type == FieldDescriptor.TYPE_MESSAGE and _holds_enum(field.message_type, inner):
            return True
    return False


@cache
def _plan(descriptor: Any) -> dict[str, Wrap] | None:
    """How to read each field of a message type that needs more than the message's
    own answer; None when the type holds no contract enum anywhere (no view)."""
    if not _holds_enum(descriptor):
        return None
    plan: dict[str, Wrap] = {}
    for field in descriptor.fields:  # Any: upb's field descriptors or the Python ones
        wrap = _field_wrap(field)
        if wrap is not None:
            plan[field.name] = _each(wrap) if field.is_repeated else wrap
    return plan


def _field_wrap(field: Any) -> Wrap | None:
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum = CONTRACT_ENUMS.get(field.enum_type.full_name)
        return None if enum is None else _enum_value(enum)
    # Checked in this order: a repeated scalar (Job.depends_on) has no message type.
    if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
        return None
    plan = _plan(field.message_type)
    if plan is None:
        return None

    def view(message: Message) -> ResultView:
        return ResultView(message, plan)

    return view


def _each(wrap: Wrap) -> Wrap:
    def each(items: Any) -> RepeatedView:
        return RepeatedView(items, wrap)

    return each


def result(message: M) -> M:
    """``message`` as the clients hand it out: a view when it holds enum fields
    (typed as the message, which it reads as), else the message itself."""
    plan = _plan(message.DESCRIPTOR)
    if plan is None:
        return message
    return cast(M, ResultView(message, plan))


def as_message(value: M) -> M:
    """The protobuf message behind a result of the clients (the value itself when it
    is a message): for ``CopyFrom``, or to put a job into another message."""
    if isinstance(value, ResultView | RepeatedView):
        return cast(M, value._message)
    return value


class ResultView:
    """A message read through, with contract enums as enums (see the module)."""

    __slots__ = ("_message", "_plan")

    def __init__(self, message: Message, plan: dict[str, Wrap] | None) -> None:
        object.__setattr__(self, "_message", message)
        object.__setattr__(self, "_plan", plan or {})

    # isinstance(view, pb.Job) holds, as for the message the view reads (the
    # fallback isinstance() takes, as unittest.mock's spec does).
    @property  # type: ignore[misc]
    def __class__(self) -> type[Message]:  # type: ignore[override]
        return type(self._message)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._message, name)
        wrap = self._plan.get(name)
        return value if wrap is None else wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._message, name, value)

    def __dir__(self) -> list[str]:
        return dir(self._message)

    def __eq__(self, other: object) -> bool:
        inner: Any = other._message if isinstance(other, ResultView) else other
        return bool(self._message == inner)

    __hash__ = None  # type: ignore[assignment] # as a message's

    def __str__(self) -> str:
        return str(self._message)

    def __repr__(self) -> str:
        return repr(self._message)

    def __copy__(self) -> ResultView:
        return ResultView(copy.copy(self._message), self._plan)

    def __deepcopy__(self, memo: dict[int, Any]) -> ResultView:
        return ResultView(copy.deepcopy(self._message, memo), self._plan)


class RepeatedView(Sequence[Any]):
    """A repeated field read through: its items as views or enums; the container's
    own methods (``add``, ``extend``, ...) act on the message."""

    __slots__ = ("_message", "_wrap")

    def __init__(self, items: Any, wrap: Wrap) -> None:
        self._message = items
        self._wrap = wrap

    def __len__(self) -> int:
        return len(self._message)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._wrap(item) for item in self._message[index]]
        return self._wrap(self._message[index])

    def __iter__(self) -> Iterator[Any]:
        return (self._wrap(item) for item in self._message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._message, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self._message) == [
            item._message if isinstance(item, ResultView) else item for item in other
        ]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))
