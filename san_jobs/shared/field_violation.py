"""One bad field of a request: the servers' shared word for it.

JobService and AiGateway both refuse a request by naming each bad field (a
`google.rpc.BadRequest` on the wire, built by `san_jobs.shared.rich_status`). Their domain
errors hold these plain values, so this module imports nothing: a domain module can
use it and still know nothing of gRPC.

The SDK (`san_jobs.client`) keeps its own public `FieldViolation`: it is part of the
client's API, and the client installs without the servers' packages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """`field` as the proto spells it (`notes[2]`, `input.text`), and what is wrong with it."""

    field: str
    description: str
