"""The contract's enums as Python enums whose members print as their names.

``print(job.status)`` prints ``JOB_STATUS_COMPLETED``, not ``3``. Each enum is made
from the generated descriptors, so a value added to the contract needs no edit here:
an ``IntEnum`` whose members are the contract's values by their contract names. A
member is still the contract's number: ``job.status == 3`` and ``job.status ==
pb.JOB_STATUS_COMPLETED`` hold, and it is sent as that number. The generated enum
wrapper's API answers too (``JobStatus.Name(3)``, ``JobStatus.Value(...)``, ``keys()``,
``values()``, ``items()``, ``ValueType``, ``DESCRIPTOR``), so code written against
``pb.JobStatus`` works with ``san_jobs.client.JobStatus`` unchanged.

Type checkers see the generated wrappers themselves (``pb.JobStatus``: its constants
typed ``pb.JobStatus.ValueType``), which is what a result's field is typed too: the
members are those numbers, with names.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, cast

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

_NUMERIC_FORMATS = frozenset("bcdoxXneEfFgG%")


class ContractEnum(IntEnum):
    """An enum of the contract (``san.jobs.v1``): str() and format() give the name."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        if spec and spec[-1] in _NUMERIC_FORMATS:  # f"{status:d}" is the number
            return int.__format__(int(self), spec)
        return format(self.name, spec)

    # The generated enum wrapper's API (pb.JobStatus.Name(3), ...).
    @classmethod
    def Name(cls, number: int) -> str:
        """The contract's name of ``number``."""
        try:
            return cls(number).name
        except ValueError:
            raise ValueError(
                f"Enum {cls.__name__} has no name defined for value {number!r}"
            ) from None

    @classmethod
    def Value(cls, name: str) -> int:
        """The number of the contract's name ``name``."""
        try:
            return int(cls[name])
        except KeyError:
            raise ValueError(
                f"Enum {cls.__name__} has no value defined for name {name!r}"
            ) from None

    @classmethod
    def keys(cls) -> list[str]:
        """The contract's names, in its order."""
        return [member.name for member in cls]

    @classmethod
    def values(cls) -> list[int]:
        """The contract's numbers, in its order."""
        return [int(member) for member in cls]

    @classmethod
    def items(cls) -> list[tuple[str, int]]:
        """(name, number) of each value, in the contract's order."""
        return [(member.name, int(member)) for member in cls]


def _enum(descriptor: Any) -> type[ContractEnum]:
    """The enum of ``descriptor``: its values by their contract names."""
    members = [(str(value.name), int(value.number)) for value in descriptor.values]
    make: Any = ContractEnum  # the functional API, with names known only at run time
    made: Any = make(str(descriptor.name), members, module=__name__, qualname=descriptor.name)
    made.DESCRIPTOR = descriptor
    made.ValueType = made.V = int  # as on the generated wrapper, at run time
    return cast(type[ContractEnum], made)


CONTRACT_ENUMS: dict[str, type[ContractEnum]] = {
    str(descriptor.full_name): _enum(descriptor)
    for descriptor in pb.DESCRIPTOR.enum_types_by_name.values()
}
"""Every enum of the contract by its full name (``san.jobs.v1.JobStatus``)."""

if TYPE_CHECKING:
    from san_jobs.proto.jobs.v1.job_service_pb2 import JobStatus as JobStatus
    from san_jobs.proto.jobs.v1.job_service_pb2 import JobType as JobType
    from san_jobs.proto.jobs.v1.job_service_pb2 import OnDuplicate as OnDuplicate
    from san_jobs.proto.jobs.v1.job_service_pb2 import PauseReason as PauseReason
else:
    _BY_NAME = {enum.__name__: enum for enum in CONTRACT_ENUMS.values()}
    JobType = _BY_NAME["JobType"]
    JobStatus = _BY_NAME["JobStatus"]
    PauseReason = _BY_NAME["PauseReason"]
    OnDuplicate = _BY_NAME["OnDuplicate"]
