"""Who a client is, for the limits that count per client: its address, IPv6 grouped by
/64 (one host usually holds a whole /64, so counting single IPv6 addresses would give
it billions of fresh starts), and the proxies whose ``X-Forwarded-For`` is believed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPV6_GROUP_PREFIX = 64

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_key(host: str) -> str:
    """The key a client is counted under: an IPv4 address as it is (an IPv4-mapped
    IPv6 address as its IPv4), an IPv6 address as its /64, anything else (a Unix
    socket, no address) as given."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_GROUP_PREFIX), strict=False))
    return str(address)


def parse_networks(text: str) -> list[Network]:
    """``--trusted-proxies``: comma-separated addresses and networks (``10.0.0.0/8``);
    ValueError naming the entry that is neither."""
    networks: list[Network] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an IP address or network (such as 10.0.0.5 or 10.0.0.0/8)"
            ) from None
    return networks


class TrustedProxies:
    """The proxies named by ``--trusted-proxies``: their connections carry many
    clients, so they are not held to one client's connection cap."""

    def __init__(self, networks: Iterable[Network] = ()) -> None:
        self.networks = tuple(networks)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def uvicorn_list(self) -> list[str]:
        """uvicorn's ``forwarded_allow_ips`` for the same proxies."""
        return [str(network) for network in self.networks]
