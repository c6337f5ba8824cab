"""Every kind of call the gateway answers, one module each (see san_jobs.ai_gateway.kind).

The servicer's unary RPCs and StreamCalls' cases are made from KINDS; a kind added
here is served by both. tests/unit/ai_gateway/test_gateway_call_kinds.py holds KINDS
to the contract (every unary RPC and StreamCalls case, and nothing else).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from san_jobs.ai_gateway.kind import Kind
from san_jobs.ai_gateway.kinds.analyze import ANALYZE
from san_jobs.ai_gateway.kinds.embed import EMBED
from san_jobs.ai_gateway.kinds.recall import RECALL
from san_jobs.ai_gateway.kinds.til import TIL

KINDS: tuple[Kind[Any, Any], ...] = (ANALYZE, TIL, RECALL, EMBED)

# StreamedCall.request case -> its kind (StreamedCallResult.outcome's case is the same).
KINDS_BY_FIELD: Mapping[str, Kind[Any, Any]] = {kind.field: kind for kind in KINDS}
