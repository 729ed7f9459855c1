"""Requests Airboard makes to URLs its users typed (alert webhooks, the cancel webhook).

A policy admin of one team can type any URL; without a guard the worker would POST to the
cloud metadata service (169.254.169.254), to localhost, or to any host of the private network,
and the delivery error shown on the policy page would tell open ports from closed ones. So:

1. Only http and https, with a host name that is not a metadata alias.
2. The name is resolved and every address must be global (not private, loopback, link-local,
   unspecified, multicast, reserved or shared address space); an IPv6 address that carries an
   IPv4 one (mapped, NAT64, IPv4-compatible, 6to4) is judged as the IPv4 address it carries.
3. At send time the name is resolved and vetted again, and the connection goes to the vetted
   address itself (the Host header and TLS name stay the URL's), so a DNS answer that changes
   between the check and the connect (rebinding) cannot redirect it.
4. No redirects: a 3xx is a failed delivery; it is never followed to another host.
`AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS` lifts step 2 for deployments whose receivers live
on the private network (and for tests, whose receiver is on 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
from urllib.parse import urlsplit

from django.conf import settings

# Names that reach a cloud provider's instance metadata service, whatever they resolve to here.
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "100-100-100-200.metadata",
    }
)
MAX_ERROR = 500
# The header a signed webhook carries: `sha256=<hex>` of HMAC-SHA256(secret, body).
SIGNATURE_HEADER = "X-Airboard-Signature"
# How a delivery error starts when the destination was refused (never retried).
REFUSED = "refused:"


class DestinationRefused(Exception):
    """The URL may not be requested; the message says why, without any network detail."""


class Unresolvable(DestinationRefused):
    """The host name does not resolve (now): refused at send time, accepted in a form."""


# IPv6 forms that carry an IPv4 address the network may route to (issue 33): NAT64's
# well-known prefix (RFC 6052: 64:ff9b::169.254.169.254 reaches the metadata service through a
# NAT64 gateway), IPv4-compatible addresses (::127.0.0.1, deprecated by RFC 4291 but still
# parsed) and 6to4 (2002::/16, `sixtofour`). Python calls them all global.
NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# RFC 8215's local-use NAT64 prefix: translated inside the operator's own network, never public.
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")


def _judged(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address a connection to `address` reaches: an IPv4 address carried in IPv6 is judged as itself."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64_WELL_KNOWN or ip in IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def is_public(address: str) -> bool:
    """Whether webhooks may connect to `address` (module docstring, step 2)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return _judged(address).is_global and not (isinstance(ip, ipaddress.IPv6Address) and ip in NAT64_LOCAL_USE)


def vet(url: str) -> tuple[str, int, str]:
    """(host, port, vetted address) of `url`, or DestinationRefused (steps 1 and 2)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise DestinationRefused("only http and https URLs are allowed")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise DestinationRefused("the URL has no host")
    if host in METADATA_HOSTS or host.endswith(".metadata.google.internal"):
        raise DestinationRefused(f"{host} is a cloud metadata service")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("the URL's port is not a number between 0 and 65535") from None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise Unresolvable(f"{host} does not resolve") from None
    addresses = [str(info[4][0]) for info in infos]
    if not settings.AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS:
        for address in addresses:
            if not is_public(address):
                raise DestinationRefused(
                    f"{host} resolves to a private, loopback, link-local or reserved address; "
                    "webhooks go to public hosts only"
                )
    return host, port, addresses[0]


def destination_problem(url: str) -> str:
    """Why `url` may not receive webhooks ('' when it may); for forms.

    A name that does not resolve yet is accepted: every delivery vets it again before sending.
    """
    try:
        vet(url)
    except Unresolvable:
        return ""
    except DestinationRefused as exc:
        return str(exc)
    return ""


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the vetted address; the Host header stays the URL's host."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As above, with TLS verified against the URL's host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """POST once to a vetted destination: (status code, error text); a failure before any answer has no code.

    Raises DestinationRefused (step 3: vetted again here, at send time).
    """
    host, port, address = vet(url)  # DestinationRefused propagates: the caller records it
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    connection = kind(host, port, address, timeout)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        code = response.status
        response.read(64 * 1024)
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
    finally:
        connection.close()
    if 300 <= code < 400:
        return code, f"HTTP {code}: redirects are not followed"
    if code >= 400:
        return code, f"HTTP {code} {response.reason}"[:MAX_ERROR]
    return code, ""


def redact_url(url: str) -> str:
    """The URL without what may be a token: userinfo, every path segment after the first, the query.

    Slack's incoming webhooks carry their secret in the path (`/services/T…/B…/token`).
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    segments = [s for s in parts.path.split("/") if s]
    path = f"/{segments[0]}" if segments else ""
    if len(segments) > 1:
        path += "/***"
    return f"{parts.scheme}://{host}{path}" + ("?***" if parts.query else "")


def sign(secret: str, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256(secret, body): what a receiver recomputes to verify."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def send(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """POST once through the guard above: (status code, error text).

    A refused destination (private, metadata, not resolving) has no status code and an error
    starting 'refused:'; redirects are never followed.
    """
    try:
        return post(url, body, headers, timeout)
    except DestinationRefused as exc:
        return None, f"{REFUSED} {exc}"
