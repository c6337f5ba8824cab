"""Health and reflection streams counted in JobService's per-peer stream bound.

A Watch (or reflection) stream is held as long as its caller likes, and health needs
no token: without a bound, one stranger could hold any number. Each such stream takes
a slot of the StreamGate that bounds StreamJobUpdates (san_jobs.shared.open_rpcs), keyed by
the caller's address (a health probe has no identity) and its connection.
"""

from __future__ import annotations

from san_jobs.job_service.transport.stream_limits import StreamGate, StreamRefusedError
from san_jobs.shared.client_identity import peer_host
from san_jobs.shared.open_rpcs import Context, StreamAdmission, StreamLease, StreamRefused


def address_admission(gate: StreamGate) -> StreamAdmission:
    """Admit a stream of `gate`'s, by address and connection (never a live feed)."""

    def admit(context: Context) -> StreamLease:
        peer = context.peer()
        try:
            return gate.admit(peer_host(peer), peer, feed=False)
        except StreamRefusedError as refusal:
            raise StreamRefused(refusal.to_status()) from None

    return admit
