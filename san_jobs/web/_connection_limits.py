"""How many connections san-web holds open, counted from accept: in all, per client
address, and the refused ones still being answered.

100 idle connections from one client used to fill ``--max-connections`` and make
everyone's next request 503; a cap per address (``address_key``: IPv6 by /64) leaves
room for the others. A refused connection is answered and lingers a little (a 503
written before a close could otherwise be reset away); those are bounded too, by the
same number as the served ones, after which the extra ones are closed at once: each
holds a file descriptor, and the process has a fixed number of them.
"""

from __future__ import annotations

from typing import Literal

from san_jobs.web._client_address import TrustedProxies, address_key

Refusal = Literal["server", "address"]


class ConnectionLimits:
    """Open connections, one instance per server (the event loop's thread only)."""

    def __init__(
        self,
        *,
        max_total: int,
        max_per_address: int,
        trusted_proxies: TrustedProxies | None = None,
    ) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.trusted_proxies = trusted_proxies or TrustedProxies()
        self.open = 0
        self.answering_refusals = 0
        self._per_address: dict[str, int] = {}

    def admit(self, host: str) -> tuple[str | None, Refusal | None]:
        """Count a new connection from ``host``: (its key, to :meth:`release`, None)
        when admitted; (None, why) when it is over a cap. A trusted proxy carries many
        clients: only the total holds it."""
        key = address_key(host)
        capped = host not in self.trusted_proxies
        if capped and self._per_address.get(key, 0) >= self.max_per_address:
            return None, "address"
        if self.open >= self.max_total:
            return None, "server"
        self.open += 1
        self._per_address[key] = self._per_address.get(key, 0) + 1
        return key, None

    def release(self, key: str) -> None:
        self.open -= 1
        left = self._per_address.get(key, 0) - 1
        if left > 0:
            self._per_address[key] = left
        else:
            self._per_address.pop(key, None)

    def from_address(self, host: str) -> int:
        """Connections open from ``host``'s address (for tests and logs)."""
        return self._per_address.get(address_key(host), 0)

    def start_answering_refusal(self) -> bool:
        """Whether one more refused connection may be answered (and linger); False:
        close it at once."""
        if self.answering_refusals >= self.max_total:
            return False
        self.answering_refusals += 1
        return True

    def refusal_answered(self) -> None:
        self.answering_refusals -= 1
