"""uvicorn's h11 HTTP protocol with the two bounds it lacks: a connection cap that
counts every open connection, and a deadline on reading a request's head.

What uvicorn 0.54 offers and why it is not enough here (read in its h11_impl.py):

- ``limit_concurrency`` is checked only once a request's head is complete, so
  connections still sending their head are never refused, and its 503 is plain text;
- ``timeout_keep_alive`` is armed only after a response and cancelled by the first byte
  that arrives, so a client that sends its head one byte at a time is never cut off
  (200 half-sent requests stayed open for good);
- ``h11_max_incomplete_event_size`` (16 KiB by default) does bound the size of a head,
  and is kept; its 400 answer is made JSON here.

So a connection over ``max_connections`` is answered 503 at once and closed, and a
connection that has not delivered a whole request head ``header_timeout`` seconds after
it opened (or after its previous answer) is answered 408 and closed.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from clients.web._errors import raw_error_response


class GuardedH11Protocol(H11Protocol):
    """uvicorn's ``H11Protocol`` with a connection cap and a request-head deadline."""

    max_connections: ClassVar[int] = 100
    header_timeout: ClassVar[float] = 5.0
    _read_timer: asyncio.TimerHandle | None = None
    # The request cycle that was current when the timer was armed: a new one
    # means a whole request head has arrived.
    _timed_cycle: object = None
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse()
        else:
            self._start_read_timer()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the answer is out; what the client sends is dropped
        super().data_received(data)
        if self._read_timer is not None and self.cycle is not self._timed_cycle:
            self._stop_read_timer()

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()
        # A pipelined request may already have started a new cycle; otherwise the
        # connection now waits for a head (or for the rest of an unread body).
        if self.cycle is answered and not self.transport.is_closing():
            self._start_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_read_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to an unparsable request (or a head over 16 KiB), in JSON."""
        self.transport.write(raw_error_response(400, "BAD_REQUEST", "invalid HTTP request"))
        self.transport.close()

    def _refuse(self) -> None:
        self.transport.write(
            raw_error_response(
                503, "UNAVAILABLE", "san-web has too many open connections; try again later"
            )
        )
        # Half-close and keep reading (and dropping) what the client sends until it
        # closes: closing with its request unread would reset the connection and
        # could destroy the 503 before the client reads it. The timer bounds it.
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._start_read_timer()

    def _start_read_timer(self) -> None:
        self._stop_read_timer()
        self._timed_cycle = self.cycle
        self._read_timer = self.loop.call_later(self.header_timeout, self._read_timed_out)

    def _stop_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        partial_head, _ = self.conn.trailing_data
        if partial_head and not self._refused and self.conn.their_state is h11.IDLE:
            self.transport.write(
                raw_error_response(
                    408,
                    "REQUEST_TIMEOUT",
                    f"the request head did not arrive within {self.header_timeout:g} seconds",
                )
            )
        self.transport.close()


def guarded_h11_protocol(*, max_connections: int, header_timeout: float) -> type[H11Protocol]:
    """A :class:`GuardedH11Protocol` class with these bounds, for ``uvicorn.Config(http=)``."""

    class Configured(GuardedH11Protocol):
        pass

    Configured.max_connections = max_connections
    Configured.header_timeout = header_timeout
    return Configured
