"""Serve a Prometheus registry at ``/metrics`` over HTTP (``--metrics-listen HOST:PORT``),
for both services.

prometheus-client's own server (``start_http_server``: a threading WSGI server in a
daemon thread) does the serving. It runs outside the event loop on purpose: a scrape
never waits for the loop, and a busy loop never delays a scrape; the collectors it
calls are written for that (job_service.metrics explains how the one that needs the
database gets its numbers from the loop). Each service passes its own
``CollectorRegistry``, not the library's global one, so that tests can run several
services in one process.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, disable_created_metrics, start_http_server

PATH = "/metrics"


class MetricsListenError(Exception):
    """The metrics endpoint cannot listen; the message says why in one line."""


def split_host_port(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) as (host without brackets, port)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class MetricsServer:
    """``/metrics`` for ``registry`` on ``listen``; start() once, stop() once."""

    def __init__(self, listen: str, registry: CollectorRegistry) -> None:
        # No `<name>_created` sample beside every counter and histogram: they double
        # the page and Prometheus ignores them in the text format. (A setting of the
        # library, for the process: each service serves metrics from its own.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.listen = listen
        self.registry = registry
        self.port = 0
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; MetricsListenError (one line) when the address cannot be used
        (a port in use, an address not of this machine)."""
        host, port = split_host_port(self.listen)
        try:
            self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            reason = error.strerror or str(error)
            raise MetricsListenError(f"cannot serve metrics on {self.listen}: {reason}") from None
        self.port = int(self._httpd.server_address[1])

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
