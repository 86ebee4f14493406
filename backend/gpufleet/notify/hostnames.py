"""A webhook's host in the form it is reached by, so that what is judged is what is reached.

The resolver and the HTTP client map a host before they use it: full-width
digits and dots (``１２７．０．０．１``), circled digits (``①②⑦.0.0.1``), the
ideographic full stop (``127。0。0。1``) and full-width letters
(``ＬｏｃａｌＨｏｓｔ``) all end as ASCII, some of them as loopback. So a host
is normalised first, with IDNA's UTS 46 mapping (the ``idna`` package), and
only the ASCII form is judged, stored and sent. A host no mapping makes a name
of (an empty label, a label over 63 characters, a ``%``, a zero-width space
alone) is not a host name, and is refused as such.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit, urlunsplit

import idna

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_NAME = 253
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


class BadHost(ValueError):
    """A host that is not a host name in any form; the message says why."""


def _not_a_host(host: str, why: str) -> BadHost:
    return BadHost(f"{host!r} is not a host name: {why}")


def ascii_host(host: str) -> str:
    """``host`` (as ``urlsplit`` gives it: no brackets) in lower-case ASCII, mapped by UTS 46 where it was not
    ASCII; raises :class:`BadHost`."""
    name = host.strip()
    if not name:
        raise _not_a_host(host, "it is empty")
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise _not_a_host(host, f"{exc} (IDNA)") from None
    name = name.lower()
    if ":" in name:  # an IPv6 address, the only host with a colon
        try:
            ipaddress.IPv6Address(name.split("%", 1)[0])
        except ValueError:
            raise _not_a_host(host, "it has a ':' but is no IPv6 address") from None
        return name
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if len(name) > MAX_NAME:
        raise _not_a_host(host, f"it is longer than {MAX_NAME} characters")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise _not_a_host(host, "each of its parts between dots is 1 to 63 letters, digits, '-' or '_', "
                                    "neither beginning nor ending with '-'")
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except (idna.IDNAError, UnicodeError) as exc:
                raise _not_a_host(host, f"{label} is no valid IDNA label ({exc})") from None
    return name


def literal(host: str) -> IP | None:
    """``host`` as an IP address, in any spelling the C library's resolver accepts (``127.1``, ``0x7f.1``)."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except (OSError, ValueError):
        return None


def ascii_url(url: str) -> str:
    """``url`` with its host in the form :func:`ascii_host` gives, an IPv4 address in any spelling the
    resolver reads (``0177.0.0.1``) as its four decimals (the rest as written); raises :class:`BadHost`, or
    ``ValueError`` for what is not a URL."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    name = ascii_host(host)
    ip = literal(name) if ":" not in name else None
    if ip is not None:
        name = str(ip)
    if name == host:
        return url  # the client lower-cases it as urlsplit does
    port = f":{parts.port}" if parts.port is not None else ""
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (f"{userinfo}@" if userinfo else "") + (f"[{name}]" if ":" in name else name) + port
    return urlunsplit(parts._replace(netloc=netloc))
