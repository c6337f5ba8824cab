"""uvicorn's h11 HTTP protocol with the bounds it lacks: connection caps that count
every open connection (in all and per client address), a deadline on the TLS handshake
and one on reading a request's head.

What uvicorn 0.54 offers and why it is not enough here (read in its h11_impl.py):

- ``limit_concurrency`` is checked only once a request's head is complete, so
  connections still sending their head are never refused, and its 503 is plain text;
- ``timeout_keep_alive`` is armed only after a response and cancelled by the first byte
  that arrives, so a client that sends its head one byte at a time is never cut off
  (200 half-sent requests stayed open for good);
- ``h11_max_incomplete_event_size`` (16 KiB by default) does bound the size of a head,
  and is kept; its 400 answer is made JSON here.

- over HTTPS, asyncio hands a connection to the protocol only once its TLS handshake
  is done (uvicorn sets no handshake deadline: asyncio's 60 s), so sockets that never
  start TLS were not counted at all and lived a minute each.

So every connection is counted from accept, in all and per client address
(:mod:`san_jobs.web._connection_limits`); one over a cap is answered 503 with
``Retry-After`` and closed (over HTTPS, closed); under TLS, the handshake is started
here (``loop.start_tls``) and must end within ``header_timeout`` seconds of accept;
and a connection that has not delivered a whole request head ``header_timeout``
seconds after it opened (or after its previous answer) is answered 408 and closed.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from san_jobs.web._client_address import TrustedProxies
from san_jobs.web._connection_limits import ConnectionLimits, Refusal
from san_jobs.web._errors import raw_error_response

REFUSALS: dict[Refusal, str] = {
    "server": "san-web has too many open connections; try again later",
    "address": "too many open connections from your address; close some and try again",
}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's ``H11Protocol`` with connection caps counted from accept, TLS started
    here under a deadline, and a request-head deadline."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits(max_total=100, max_per_address=100)
    header_timeout: ClassVar[float] = 5.0
    tls: ClassVar[ssl.SSLContext | None] = None
    _read_timer: asyncio.TimerHandle | None = None
    # The request cycle that was current when the timer was armed: a new one
    # means a whole request head has arrived.
    _timed_cycle: object = None
    _refused = False
    _answering_refusal = False
    _counted: str | None = None  # the address key this connection holds in `limits`
    _accepted_at = 0.0
    _lost = False
    _raw: asyncio.Transport | None = None  # the TCP transport under TLS, until it is up
    _handshake: asyncio.Task[None] | None = None
    # Decrypted bytes that arrive between the end of the handshake and the moment the
    # handshake's task resumes to hand the connection to uvicorn.
    _early = b""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Called at accept: the listening socket is plain TCP even for HTTPS, so that
        # a client that never finishes (or starts) its handshake is counted and timed.
        self._accepted_at = self.loop.time()
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self._counted, refusal = self.limits.admit(host)
        if refusal is not None:
            self._refuse(transport, refusal)
        elif self.tls is None:
            self._serve(transport)
        else:
            # Nothing may be read before start_tls puts its TLS layer in between: the
            # ClientHello would reach this protocol instead. asyncio's transports wait
            # for connection_made before reading, and honour this pause (uvloop's start
            # reading right after it, whatever it said: cli.py runs san-web on asyncio).
            transport.pause_reading()
            self._raw = transport
            # Held here: the loop keeps only a weak reference to a task.
            self._handshake = self.loop.create_task(self._start_tls(transport, self.tls))

    def _serve(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._start_read_timer(self._accepted_at + self.header_timeout)

    async def _start_tls(self, transport: asyncio.Transport, context: ssl.SSLContext) -> None:
        try:
            secured = await self.loop.start_tls(
                transport,
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=self.header_timeout,
            )
        except asyncio.CancelledError:
            self._release()  # the server is stopping; start_tls has closed the socket
            raise
        except Exception:  # whatever ended it, the connection is gone
            # Not TLS, a refused certificate, or too slow: start_tls has closed it.
            self._release()
            return
        self._raw = None
        if self._lost or secured is None:
            return  # closed between the handshake's end and now
        self._serve(secured)
        if self._early:
            early, self._early = self._early, b""
            self.data_received(early)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the answer is out; what the client sends is dropped
        if self.transport is None:
            if self._raw is not None and self._raw.get_protocol() is self:
                self._raw.abort()  # plain bytes before the TLS layer: cannot be served
                return
            self._early += data
            return
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
        self._release()
        if self._answering_refusal:
            self._answering_refusal = False
            self.limits.refusal_answered()
        self._lost = True
        if self.transport is not None:
            super().connection_lost(exc)

    def _release(self) -> None:
        if self._counted is not None:
            self.limits.release(self._counted)
            self._counted = None

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to an unparsable request (or a head over 16 KiB), in JSON."""
        self.transport.write(raw_error_response(400, "BAD_REQUEST", "invalid HTTP request"))
        self.transport.close()

    def _refuse(self, transport: asyncio.Transport, refusal: Refusal) -> None:
        """503 for a connection over a cap. Over HTTPS nothing can be said before a
        handshake, and handshaking only to refuse would spend what the cap protects:
        it is closed. Past the budget for refusals being answered, too."""
        if self.tls is not None or not self.limits.start_answering_refusal():
            transport.close()
            return
        self._answering_refusal = True
        super().connection_made(transport)
        retry = str(max(1, math.ceil(self.header_timeout)))
        self.transport.write(
            raw_error_response(
                503, "UNAVAILABLE", REFUSALS[refusal], headers={"retry-after": retry}
            )
        )
        # Half-close and keep reading (and dropping) what the client sends until it
        # closes: closing with its request unread would reset the connection and
        # could destroy the 503 before the client reads it. The timer bounds it.
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._start_read_timer()

    def _start_read_timer(self, deadline: float | None = None) -> None:
        self._stop_read_timer()
        self._timed_cycle = self.cycle
        when = self.loop.time() + self.header_timeout if deadline is None else deadline
        self._read_timer = self.loop.call_at(when, self._read_timed_out)

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


def guarded_h11_protocol(
    *,
    max_connections: int,
    header_timeout: float,
    max_connections_per_address: int | None = None,
    trusted_proxies: TrustedProxies | None = None,
    tls: ssl.SSLContext | None = None,
) -> type[H11Protocol]:
    """A :class:`GuardedH11Protocol` class with these bounds (per address: the total
    unless given), for ``uvicorn.Config(http=)``; with ``tls``, it serves HTTPS itself
    (uvicorn is given no certificate)."""

    class Configured(GuardedH11Protocol):
        pass

    Configured.limits = ConnectionLimits(
        max_total=max_connections,
        max_per_address=max_connections_per_address or max_connections,
        trusted_proxies=trusted_proxies,
    )
    Configured.header_timeout = header_timeout
    Configured.tls = tls
    return Configured
