"""Where a webhook may be sent: public addresses only, unless an admin allows a range.

A webhook is a request the server makes on a member's behalf, from inside the
team's network. Left open, it reaches what only the server should reach: a
service on loopback, the cloud's metadata endpoint, a database on the private
network. So a webhook's address is checked twice:

- first, the host is normalised (``gpufleet.notify.hostnames``: IDNA's UTS 46
  mapping), so full-width or circled digits and dots are judged as the
  resolver reads them, and the ASCII form is what is stored and sent;
- when it is registered or changed (:func:`check_host`): a literal address in
  any spelling (``127.1``, ``2130706433``, ``0x7f000001``, ``::ffff:127.0.0.1``)
  and the names ``localhost`` and ``*.localhost``; a DNS name is not resolved
  here, since its answer may change;
- at every connection (:class:`GuardedBackend`): the name is resolved, every
  address it resolves to is checked, and the connection goes to the address
  that was checked, so a name that resolves differently a moment later
  (DNS rebinding) changes nothing. Redirects are never followed: a 3xx is an
  answer like any other, and its ``Location`` is not visited.

An address is allowed when it is global unicast (``ipaddress``'s
``is_global``, IPv4 inside IPv6 unwrapped first), or when it lies in one of
``GPUFLEET_WEBHOOK_ALLOWED_NETWORKS`` (an admin's list of CIDR ranges, for a
receiver on the team's own network).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from gpufleet.notify.hostnames import IP, BadHost, ascii_host, literal

SETTING = "GPUFLEET_WEBHOOK_ALLOWED_NETWORKS"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"),
             ipaddress.ip_address("169.254.170.2"), ipaddress.ip_address("100.100.100.200")}


class AddressRefused(httpcore.ConnectError):
    """A webhook's address is not one the server sends to; the message says which and why."""


def _embedded_v4(ip: IP) -> IP:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo), else the address itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return ip


def _kind(ip: IP) -> str | None:
    """What makes ``ip`` an inside address (a few words), or None for a public one."""
    if ip in _METADATA:
        return "a cloud metadata address"
    for test, words in (("is_unspecified", "an unspecified address"), ("is_loopback", "a loopback address"),
                        ("is_link_local", "a link-local address"), ("is_multicast", "a multicast address"),
                        ("is_private", "a private address"), ("is_reserved", "a reserved address")):
        if getattr(ip, test):
            return words
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "a shared (carrier-grade NAT) address"
    return None if ip.is_global else "not a public address"


def parse_networks(values: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(v.strip(), strict=False) for v in values]


class Policy:
    """The addresses webhooks may reach: public ones, and the admin's allowed networks."""

    def __init__(self, allowed: Iterable[str] = ()):
        self.allowed = parse_networks(allowed)

    def refusal(self, ip: IP, shown: str) -> str | None:
        """Why ``ip`` (reached as ``shown``) is refused, or None when it is allowed."""
        inner = _embedded_v4(ip)
        if any(ip in net or inner in net for net in self.allowed):
            return None
        kind = _kind(inner) or _kind(ip)  # an IPv4 address inside IPv6 is named by what it is
        if kind is None:
            return None
        via = "" if shown == str(ip) else f" resolves to {ip}, which"
        return (f"webhooks go only to public addresses: {shown}{via} is {kind}; an admin can allow a range "
                f"with {SETTING}")

    def check_host(self, host: str) -> None:
        """Refuse what is no host name, a literal inside address or a loopback name, each judged in its
        normalised form (at registration and at each connection; no DNS lookup)."""
        try:
            name = ascii_host(host).rstrip(".")
        except BadHost as exc:
            raise AddressRefused(str(exc)) from None
        said = host.strip().rstrip(".").lower()
        read_as = "" if name == said else f"{host} is {name} once normalised (IDNA); "
        if name == "localhost" or name.endswith(".localhost"):
            raise AddressRefused(f"{read_as}webhooks go only to public addresses: {name} is this machine (loopback)")
        ip = literal(name)
        if ip is not None and (why := self.refusal(ip, name if read_as else host)) is not None:
            raise AddressRefused(read_as + why)

    def resolve(self, host: str, port: int) -> str:
        """The address to connect to for ``host``: every address it resolves to must be allowed."""
        self.check_host(host)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            why = self.refusal(ipaddress.ip_address(address.split("%", 1)[0]), host)
            if why is not None:
                raise AddressRefused(why)
        if not addresses:
            raise httpcore.ConnectError(f"{host} resolves to no address")
        return addresses[0]


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's network backend that connects only to addresses the policy allows, as resolved now."""

    def __init__(self, policy: Policy):
        self.policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        address = self.policy.resolve(host, port)
        # TLS still checks the certificate against the URL's name: httpcore passes it to start_tls.
        return super().connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                   socket_options=socket_options)


def client(policy: Policy, timeout_s: float) -> httpx.Client:
    """An HTTP client for webhooks: the policy at every connection, no redirect followed, no proxy.

    A proxy from the environment would resolve and connect on its own, past the
    check, so webhooks are sent directly.
    """
    transport = httpx.HTTPTransport(retries=0)
    pool = transport._pool  # httpx exposes no network backend option
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError("this httpcore version has no network backend to guard; webhooks cannot be sent")
    pool._network_backend = GuardedBackend(policy)
    return httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=False, trust_env=False)


def refused(exc: BaseException) -> AddressRefused | None:
    """The refusal behind an httpx error, if the address was the reason."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
