"""The bounds on what one caller may make the gateway hold or send.

Every answer fits in a response, whatever the backend made of it: one that does not
fails its own call (INTERNAL, MALFORMED_RESPONSE), never the stream it travels on. A
StreamCalls stream holds a bounded number of calls: those in flight plus the results
not yet sent (``--max-stream-calls``); while it is full, the gateway stops reading it.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB

# The largest answer (the serialized response of one call) the gateway sends: agreed
# with JobService, which takes results of this size.
MAX_ANSWER_BYTES = 4 * MIB
# Room kept free in a response message beside one answer (call_id, framing, details).
ENVELOPE_BYTES = 64 * KIB
# A StreamCalls response message batches results up to about this much.
BATCH_BYTES = 1 * MIB
# The protocol caps of StreamCalls: longer ids, or more calls in one request message,
# break the protocol and end the stream with INVALID_ARGUMENT.
MAX_CALL_ID_CHARS = 128
MAX_CALLS_PER_MESSAGE = 1000
# Framing of one repeated message field entry: its tag and length (at most 5 bytes).
ENTRY_FRAMING_BYTES = 6


@dataclass(frozen=True)
class StreamLimits:
    """How much one call's answer and one stream may hold."""

    # Calls in flight plus unsent results on one stream; the reader pauses at this many.
    max_stream_calls: int = 1000
    # The largest answer sent for one call; bigger ones become MALFORMED_RESPONSE.
    max_answer_bytes: int = MAX_ANSWER_BYTES

    @classmethod
    def for_message_bytes(cls, max_message_bytes: int, max_stream_calls: int) -> StreamLimits:
        """The limits for a server whose send limit is ``max_message_bytes``: an answer
        with its envelope always fits in one message."""
        answer = min(MAX_ANSWER_BYTES, max_message_bytes - ENVELOPE_BYTES)
        return cls(max_stream_calls=max_stream_calls, max_answer_bytes=answer)

    @property
    def batch_bytes(self) -> int:
        """How much of results a response message batches (a bigger result goes alone)."""
        return min(BATCH_BYTES, self.max_answer_bytes)
