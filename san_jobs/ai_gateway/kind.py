"""What a kind of call is: everything the gateway knows of one RPC, in one value.

A :class:`Kind` names its RPC, says how its request is validated into a plain input,
which of the input's texts the token limit counts (and which of the answer's are its
output), and which backend method does the work. Each kind is declared in its own
module under :mod:`san_jobs.ai_gateway.kinds`, with its plain input and result; the
transport runs them all the same way (calls.py), and builds the response from the
result by the contract's naming convention: the response message carries the
result's fields under the same names, plus ``usage``. A result's own ``usage`` is what
the provider says the call consumed (the openai backend reads its ``usage``) or a
cached answer's mark; None when the provider said nothing, and the gateway counts
with its tokenizer.

The backend side is a naming convention rather than a protocol method per kind: a
backend answers a kind with its coroutine method named ``kind.handler``
(``async def analyze(self, request: AnalyzeInput, time_left: float | None) ->
AnalyzeResult``), so the :class:`~san_jobs.ai_gateway.backends.base.Backend` protocol
does not grow with every kind. tests/unit/ai_gateway/test_gateway_call_kinds.py checks
that every shipped backend has every kind's handler, with the kind's types.

No protobuf here: a kind reads its request through the attributes it names (the
generated message has them), so the kinds stay in the gateway's core.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from san_jobs.ai_gateway.backends.base import Backend

In = TypeVar("In")
Out = TypeVar("Out")

# A backend's handler: (validated input, seconds left or None) -> plain result.
Handler = Callable[[In, float | None], Awaitable[Out]]

# How every kind refuses a required text that is blank (the bounds that JobService
# checks too are san_jobs.shared.input_rules).
BLANK = "must not be empty or whitespace"

_CAMEL_HUMP = re.compile(r"(?<!^)(?=[A-Z])")


@dataclass(frozen=True)
class Kind(Generic[In, Out]):
    """One kind of call (one unary RPC, one StreamCalls case)."""

    # The RPC's name, as the contract spells it (in call records, logs and metrics).
    method: str
    # The name of the backend method that answers it (see the module docstring).
    handler: str
    # What it does, in a few words (the servicer method's docstring).
    summary: str
    # request message -> the validated plain input; raises InvalidRequest naming each
    # bad field as the proto spells it (for the BadRequest details).
    validate: Callable[[Any], In]
    # The input's texts, as the token limit counts them.
    input_texts: Callable[[In], Iterable[str]]
    # The answer's texts, counted as its output tokens when the provider counted none.
    answer_texts: Callable[[Out], Iterable[str]]

    @property
    def field(self) -> str:
        """Its case of StreamedCall.request and StreamedCallResult.outcome: the RPC's
        name in snake_case (GenerateTil -> generate_til)."""
        return _CAMEL_HUMP.sub("_", self.method).lower()

    def handler_of(self, backend: Backend) -> Handler[In, Out]:
        """``backend``'s handler of this kind (AttributeError for a backend without one:
        the call fails as INTERNAL; the test of the backends catches it first)."""
        return cast("Handler[In, Out]", getattr(backend, self.handler))
