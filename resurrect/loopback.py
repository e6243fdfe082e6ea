"""Whether a network peer is this host's loopback interface, where plaintext stays local.

Used wherever resurrect sends a credential (Temporal's, slurmrestd's token): plaintext to
anything else crosses a network, so it is refused unless the configuration allows it.
A name other than ``localhost`` is never resolved to decide: what it resolves to may change.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback_host(host: str) -> bool:
    """``host`` (a name or an IP literal, IPv6 with or without brackets) is ``localhost``
    or a loopback address (127.0.0.0/8, ::1)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_target(target: str) -> bool:
    """``host:port`` (or a bare host) names a loopback address."""
    host = target.rsplit(":", 1)[0] if ":" in target and not target.endswith("]") else target
    return is_loopback_host(host)


def cleartext_refusal(
    url: str, *, what: str, allow_setting: str, allow_plaintext: bool = False
) -> str | None:
    """Why sending ``what`` (a credential) to ``url`` is refused, or None: ``http://`` to
    anything but this host's loopback interface crosses a network in clear text, where
    anyone on the path reads it and acts as resurrect, unless ``allow_plaintext`` (the
    setting ``allow_setting``) says the network is trusted."""
    if not url.startswith("http://") or allow_plaintext:
        return None
    if is_loopback_host(urlsplit(url).hostname or ""):
        return None
    return (
        f"refusing to send {what} in clear text to {url}: it is not this host's loopback"
        " interface, and anyone on the network path could read it and act as resurrect;"
        f" use https:// or a unix: socket, or set {allow_setting}: true for a network you"
        " trust"
    )
