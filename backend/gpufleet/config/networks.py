"""The check of a setting that lists IP networks, shared by the sections that have one."""

from __future__ import annotations

import ipaddress


def ip_networks(values: list[str], what: str) -> list[str]:
    """``values`` stripped, or a ValueError naming the first that is not ``what`` (its words and examples)."""
    for item in values:
        try:
            ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not {what}") from None
    return [item.strip() for item in values]
