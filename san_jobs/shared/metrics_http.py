"""Serve a Prometheus registry at ``/metrics`` over HTTP (``--metrics-listen HOST:PORT``),
for both services.

prometheus-client's own server (``start_http_server``: a threading WSGI server in a
daemon thread) does the serving. It runs outside the event loop on purpose: a scrape
never waits for the loop, and a busy loop never delays a scrape; the collectors it
calls are written for that (san_jobs.job_service.metrics explains how the one that needs the
database gets its numbers from the loop). Each service passes its own
``CollectorRegistry``, not the library's global one, so that tests can run several
services in one process.

It is bounded like every other listener: beyond loopback it starts only with
``--insecure`` (it has neither TLS nor authentication: san_jobs.shared.exposure's rule);
at most MAX_CONNECTIONS connections are served at once (one thread each; one more is
answered 503 and closed at once), and a connection is closed READ_TIMEOUT_SECONDS after
it was accepted, however slowly it sends: 500 half-sent requests no longer start 500
threads that wait for ever.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, disable_created_metrics, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from san_jobs.shared.exposure import is_loopback

logger = logging.getLogger("san_shared.metrics_http")

PATH = "/metrics"
# A scraper or two, and a person with curl: far more than enough.
MAX_CONNECTIONS = 16
# From accept to the last byte answered: a scrape takes milliseconds.
READ_TIMEOUT_SECONDS = 10.0
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class MetricsListenError(Exception):
    """The metrics endpoint cannot listen; the message says why in one line."""


def split_host_port(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) as (host without brackets, port)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def metrics_exposure_problem(listen: str | None, *, insecure: bool) -> str | None:
    """Why ``--metrics-listen`` must not be used, or None: beyond loopback only with
    --insecure (the endpoint has no TLS and no authentication). One line."""
    if listen is None or insecure or is_loopback(listen):
        return None
    return (
        f"refusing to serve metrics on {listen} (not a loopback address): /metrics has no "
        "TLS or authentication; use a loopback address, or --insecure to accept the risk"
    )


class _Handler(WSGIRequestHandler):
    """A request on one connection; the socket's timeout bounds every read and write."""

    timeout = READ_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: a scrape every few seconds is not news."""


class _BoundedServer(ThreadingWSGIServer):
    """prometheus-client's thread-per-connection server, with at most `max_connections`
    threads and each connection closed `timeout` seconds after it was accepted."""

    # The listen backlog: a burst of connections waits to be accepted (and refused
    # when over the cap) instead of retrying its SYN for seconds.
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], family: int, max_connections: int, timeout: float
    ) -> None:
        self.address_family = family
        handler = type("_TimedHandler", (_Handler,), {"timeout": timeout})
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._timeout = timeout
        self._accepted: dict[socket.socket, float] = {}
        self._lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # Full: say so and close, without a thread (a scraper retries next interval).
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        with self._lock:
            self._accepted[request] = time.monotonic()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def service_actions(self) -> None:
        """Between polls of serve_forever (every half second): cut connections that
        have had their time; their threads then end."""
        deadline = time.monotonic() - self._timeout
        with self._lock:
            late = [conn for conn, accepted in self._accepted.items() if accepted <= deadline]
        for conn in late:
            with contextlib.suppress(OSError):  # closed meanwhile
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (cut at its deadline, or gone mid-answer): one debug
        line, not socketserver's traceback on stderr for every hostile client."""
        logger.debug("metrics connection from %s ended early", client_address, exc_info=True)

    def _forget(self, request: Any) -> None:
        with self._lock:
            known = self._accepted.pop(request, None) is not None
        if known:
            self._slots.release()


class MetricsServer:
    """``/metrics`` for ``registry`` on ``listen``; start() once, stop() once."""

    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        *,
        insecure: bool = False,
        max_connections: int = MAX_CONNECTIONS,
        timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        """``insecure``: the operator's --insecure (needed beyond loopback);
        ``max_connections``, ``timeout``: the bounds above (tests make them small)."""
        # No `<name>_created` sample beside every counter and histogram: they double
        # the page and Prometheus ignores them in the text format. (A setting of the
        # library, for the process: each service serves metrics from its own.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.listen = listen
        self.registry = registry
        self.insecure = insecure
        self.max_connections = max_connections
        self.timeout = timeout
        self.port = 0
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; MetricsListenError (one line) when the address cannot be used
        (a port in use, an address not of this machine, beyond loopback without --insecure)."""
        problem = metrics_exposure_problem(self.listen, insecure=self.insecure)
        if problem is not None:
            raise MetricsListenError(problem)
        host, port = split_host_port(self.listen)
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            httpd = _BoundedServer(
                (str(sockaddr[0]), port), family, self.max_connections, self.timeout
            )
        except OSError as error:
            reason = error.strerror or str(error)
            raise MetricsListenError(f"cannot serve metrics on {self.listen}: {reason}") from None
        httpd.set_app(make_wsgi_app(self.registry))
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        self.port = int(httpd.server_address[1])

    @property
    def url(self) -> str:
        """Where the metrics are, with the port really bound (``--metrics-listen`` may say 0)."""
        host = split_host_port(self.listen)[0]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}{PATH}"

    def stop(self) -> None:
        """Stop serving and close the socket. Blocks up to half a second (the server's
        poll interval): call it from a thread when on an event loop."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
