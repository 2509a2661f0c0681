"""Outbound calls a tenant configures (alert webhooks, apprise URLs): never inside the network.

A team admin chooses the URL, so without a guard the channel form is a way to make the server
call its own admin ports, the database, other tenants' private services or the cloud metadata
service (169.254.169.254 hands out instance credentials). The rules, as GitLab's and Grafana's
webhook guards apply them:

- The host is resolved once, every address it resolves to must be allowed, and the connection
  goes to that vetted address (the Host header and TLS SNI carry the name). A DNS answer that
  changes between the check and the connect (rebinding) cannot slip in: there is no second
  lookup.
- Refused: loopback, private (RFC 1918, fc00::/7), link-local (169.254.0.0/16, fe80::/10),
  CGNAT (100.64.0.0/10), multicast, unspecified, reserved, anything else not globally routable,
  and the cloud metadata addresses -- IPv4-mapped and NAT64 forms are judged as the IPv4
  address inside them.
- GREENOPS_OUTBOUND_ALLOW names ranges an operator trusts (an on-prem receiver at
  10.20.0.0/16). Metadata addresses stay refused even inside an allowed range.
- Redirects are never followed (a webhook's 3xx is a failed delivery), and what the receiver
  answered is never shown: only its status. A refused address and an address that did not
  answer read alike to the user, so the form cannot map the network.

Third-party libraries (apprise, and through it requests, smtplib, ...) open their own sockets:
`guard()` checks, for the code running inside it, every socket.connect against the same rules,
on the address actually being connected to. This is the core layer: it imports no app.
"""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata endpoints: AWS/GCP/Azure/OpenStack/DigitalOcean (169.254.169.254), AWS's
# IPv6 one, Alibaba (100.100.100.200), Oracle's legacy one (192.0.0.192), AWS ECS tasks
# (169.254.170.2).
METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192"))
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = ipaddress.ip_network("64:ff9b::/96")

# What the user reads for every reason a connection did not happen (refused by the guard,
# refused by the host, filtered, reset, unresolvable): one sentence, so the answer does not
# tell an open port from a closed one.
UNREACHABLE = "could not connect to the receiver (the address is not allowed for outbound " \
              "alerts, or nothing answered)"


class Refused(OSError):
    """The guard refused an address before any packet was sent. `reason` is for logs and
    operators; users see UNREACHABLE."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(f"outbound call to {host} ({address}) refused: {reason}")
        self.host, self.address, self.reason = host, address, reason


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # why not, or which rule let it through


def allow_list() -> list[Network]:
    """GREENOPS_OUTBOUND_ALLOW: comma-separated CIDR ranges (bad entries fail at start-up in
    settings, not here)."""
    return [ipaddress.ip_network(r.strip(), strict=False)
            for r in getattr(settings, "GREENOPS_OUTBOUND_ALLOW", []) if r.strip()]


def _embedded_v4(ip: Address) -> Address:
    """::ffff:a.b.c.d, 64:ff9b::a.b.c.d and 6to4 carry an IPv4 address: judge that one."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def decide(address: str | Address, allow: list[Network] | None = None) -> Decision:
    """Whether a connection to this IP address may be made. Pure: no lookup, no packet."""
    try:
        ip = ipaddress.ip_address(str(address).split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return Decision(False, f"{address!r} is not an IP address")
    inner = _embedded_v4(ip)
    if ip in METADATA or inner in METADATA:
        return Decision(False, "cloud instance metadata address")
    allow = allow_list() if allow is None else allow
    for net in allow:
        if ip.version == net.version and ip in net or \
                inner.version == net.version and inner in net:
            return Decision(True, f"allowed by GREENOPS_OUTBOUND_ALLOW ({net})")
    for candidate in {ip, inner}:
        checks = (("loopback", candidate.is_loopback), ("unspecified", candidate.is_unspecified),
                  ("link-local", candidate.is_link_local), ("multicast", candidate.is_multicast),
                  ("CGNAT (100.64.0.0/10)", candidate in CGNAT),
                  ("private", candidate.is_private), ("reserved", candidate.is_reserved),
                  ("not globally routable", not candidate.is_global))
        for name, hit in checks:
            if hit:
                return Decision(False, f"{name} address")
    return Decision(True, "public address")


def resolve(host: str, port: int) -> list[tuple[int, str]]:
    """(family, address) of every address `host` resolves to, in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys((family, sa[0]) for family, _, _, _, sa in infos))


def vet(host: str, port: int) -> tuple[int, str]:
    """Resolve `host` once and return the (family, address) to connect to. Every address it
    resolves to must be allowed: a name that mixes a public and a private answer is refused
    whole, so a client that picks another answer cannot be steered inside."""
    host = host.strip("[]")
    try:
        answers = resolve(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(host, "?", f"does not resolve ({exc})") from None
    if not answers:
        raise Refused(host, "?", "does not resolve")
    for _family, address in answers:
        d = decide(address)
        if not d.allowed:
            raise Refused(host, address, d.reason)
    return answers[0]


def _raw_connect(sock: socket.socket, address: tuple) -> None:
    """The real connect. Tests replace it with a recorder that refuses anything off loopback,
    so no test can send a packet beyond 127.0.0.0/8 even by mistake."""
    _ORIGINAL_CONNECT(sock, address)


def connect(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to a vetted address of `host`."""
    family, address = vet(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        _raw_connect(sock, (address, port))
    except BaseException:
        sock.close()
        raise
    return sock


# ---- HTTP without redirects, to the vetted address ----------------------------------------------

@dataclass
class Response:
    status: int
    reason: str


class _Http(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = connect(self.host, self.port, self.timeout)


class _Https(http.client.HTTPSConnection):
    def connect(self) -> None:
        sock = connect(self.host, self.port, self.timeout)
        ctx = self._context if hasattr(self, "_context") else ssl.create_default_context()
        self.sock = ctx.wrap_socket(sock, server_hostname=self.host)  # SNI and cert: the name


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Response:
    """POST `body` to `url` once: no redirect is followed (the caller sees the 3xx), at most
    1 KiB of the answer is read and none of it is returned."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(url, "?", "only http:// and https:// URLs")
    cls = _Https if parts.scheme == "https" else _Http
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read(1024)
        return Response(resp.status, resp.reason)
    finally:
        conn.close()


# ---- The same rules for libraries that open their own sockets -----------------------------------

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("greenops_outbound", default=False)
_ORIGINAL_CONNECT = socket.socket.connect
_ORIGINAL_CONNECT_EX = socket.socket.connect_ex
_INSTALL = threading.Lock()
_installed = False


def _checked(sock: socket.socket, address) -> tuple:
    """The address this socket may connect to: an IP that passed `decide`, with a name
    resolved and vetted here (so the library's own lookup cannot answer differently)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        raise Refused(str(address), str(address), "only TCP/IP connections")
    host, port = address[0], address[1]
    try:
        ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        family, vetted = vet(str(host), int(port))
        if family != sock.family:
            raise Refused(str(host), vetted, "resolves to another address family") from None
        return (vetted, port, *address[2:])
    d = decide(host)
    if not d.allowed:
        raise Refused(str(host), str(host), d.reason)
    return address


def _guarded_connect(sock: socket.socket, address) -> None:
    if not _ACTIVE.get():
        return _ORIGINAL_CONNECT(sock, address)
    return _raw_connect(sock, _checked(sock, address))


def _guarded_connect_ex(sock: socket.socket, address) -> int:
    if not _ACTIVE.get():
        return _ORIGINAL_CONNECT_EX(sock, address)
    try:
        _raw_connect(sock, _checked(sock, address))
    except OSError as exc:
        return exc.errno or 111
    return 0


def _install() -> None:
    """Wrap socket.socket.connect once per process. Outside guard() the wrapper only calls the
    original: other code (the database, Redis, Celery) is untouched."""
    global _installed
    with _INSTALL:
        if not _installed:
            socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
            socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
            _installed = True


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Inside this block every TCP connect made by this thread (or by a task that copied its
    context) goes through the rules above. Code that hands work to a thread pool without its
    context escapes it: run such libraries in their sequential mode (apprise: async_mode off)."""
    _install()
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
