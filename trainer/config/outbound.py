"""Which URLs a run may call, and the one way it calls them (docs/decisions/0047-outbound-calls-and-ray-auth.md).

Every URL a run contacts (an llm_judge reward's `judge_api_url`, a code_sandbox reward's `code_url`) goes
through `check_url`, at validation and again right before each request (`post_json`):

- only `http://` and `https://`, and no query string, fragment or `user@` in the base URL (a `?x=` suffix
  would turn the path the trainer appends into a query and reach any path of the host);
- the host is resolved and every address it resolves to must be public: loopback, private (RFC 1918, ULA),
  link-local (169.254.169.254, the cloud metadata service, included), multicast, unspecified, reserved,
  shared (CGNAT 100.64/10) and other non-global addresses are refused, as is any address of this machine;
- unless the deployment allows the URL in POLICYLAB_OUTBOUND_ALLOW (comma-separated host names, e.g.
  `judge.internal`, or URL prefixes, e.g. `http://127.0.0.1:9000/v1`), which is how a judge on the local
  network, or a test's fake judge on 127.0.0.1, is reached;
- even then, the platform's own service ports (POLICYLAB_OUTBOUND_DENY, comma-separated ports, which the
  platform sets for its runs: Ray's dashboard and GCS, Redis, PostgreSQL, the web) stay refused on
  loopback and on this machine's addresses.

`post_json` then connects to the address it checked (no second lookup, so a name cannot resolve to a
public address for the check and to 127.0.0.1 for the connection), with the URL's host in the Host header
and in TLS's SNI and certificate check. It uses no proxy and follows no redirect. A failed call is told as
its status and the standard reason phrase only: nothing the server wrote is quoted.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import SplitResult, urlsplit

ALLOW_VAR = "POLICYLAB_OUTBOUND_ALLOW"
DENY_VAR = "POLICYLAB_OUTBOUND_DENY"
SCHEMES = ("http", "https")
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a JSON answer larger than this is not read
VALID = ("valid: an http(s) URL without a query string, fragment or user@ whose host resolves only to public "
         f"addresses, or one the deployment allows in {ALLOW_VAR}")

Resolver = Callable[[str, int], list[str]]  # (host, port) -> the IP addresses it resolves to


class OutboundRefused(ValueError):
    """A URL the run may not call; the message names the field, why, and what would be valid."""


class OutboundFailed(RuntimeError):
    """A permitted call that gave no answer: `status` is the HTTP status (None: no answer at all)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses, as the system's resolver gives them (a literal IP gives itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class OutboundPolicy:
    allow: tuple[str, ...] = ()  # host names or URL prefixes allowed whatever they resolve to
    deny_ports: frozenset[int] = frozenset()  # the platform's own services: refused on local addresses

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OutboundPolicy:
        env = os.environ if env is None else env
        allow = tuple(p.strip() for p in env.get(ALLOW_VAR, "").split(",") if p.strip())
        ports = [p.strip() for p in env.get(DENY_VAR, "").split(",") if p.strip()]
        bad = [p for p in ports if not p.isdigit()]
        if bad:
            raise OutboundRefused(f"{DENY_VAR}: {', '.join(bad)} are not port numbers; valid: e.g. 8265,6379")
        return cls(allow, frozenset(int(p) for p in ports))

    def allows(self, url: SplitResult) -> bool:
        return any(_matches(entry, url) for entry in self.allow)


def _matches(entry: str, url: SplitResult) -> bool:
    """A host entry matches the URL's host; a URL prefix its scheme, host and port, and a leading part of its
    path cut at a `/` (so `http://h:90` matches neither `http://h:9000` nor `http://h:90/v1x` for `/v1`)."""
    if "://" not in entry:
        return (url.hostname or "") == entry.lower().rstrip(".")
    prefix = urlsplit(entry)
    if (prefix.scheme.lower(), prefix.hostname, _port(prefix)) != (url.scheme.lower(), url.hostname, _port(url)):
        return False
    base, path = prefix.path.rstrip("/"), url.path
    return path == base or path.startswith(base + "/")


def _port(url: SplitResult) -> int:
    return url.port or (443 if url.scheme.lower() == "https" else 80)


def _is_this_machine(address: str) -> bool:
    """True when the address is one of this machine's own (binding to it succeeds)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def _is_local(address: str) -> bool:
    """True for an address that reaches this machine: loopback, unspecified, or one of its own."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified or _is_this_machine(str(ip))


def address_problem(address: str) -> str | None:
    """Why a run may not reach this address by default, or None for a public address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):  # an IPv4 address inside an IPv6 one is judged as itself
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return address_problem(str(embedded))
    reasons = (
        (ip.is_loopback, "a loopback address"),
        (ip.is_unspecified, "the unspecified address"),
        (ip.is_link_local, "a link-local address (169.254.169.254 is the cloud metadata service)"),
        (ip.is_multicast, "a multicast address"),
        (_is_this_machine(str(ip)), "an address of this machine"),  # binding to a multicast one succeeds too
        (ip in ipaddress.ip_network("100.64.0.0/10"), "a shared (CGNAT) address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    return next((reason for hit, reason in reasons if hit), None)


def url_form_problem(url: str) -> str | None:
    """What is wrong with the URL's form (no resolution), or None."""
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return "holds whitespace or a control character"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme.lower() not in SCHEMES:
        return "is not an http:// or https:// URL"
    if not parts.hostname:
        return "names no host"
    if "@" in parts.netloc:
        return "holds a user@ part (credentials go in their own field)"
    if "?" in url:
        return "holds a query string (`?…`): the path the trainer appends would become part of the query"
    if "#" in url:
        return "holds a fragment (`#…`)"
    return None


@dataclass(frozen=True)
class Target:
    """A checked URL and the address to connect to."""

    url: SplitResult
    address: str


def check_url(url: str, field: str, *, policy: OutboundPolicy | None = None,
              resolver: Resolver = system_resolver) -> Target:
    """The URL checked against the policy (module docstring), resolved once; raises OutboundRefused naming
    `field`, or OSError (socket.gaierror) when the host does not resolve."""
    policy = OutboundPolicy.from_env() if policy is None else policy
    problem = url_form_problem(url)
    if problem:
        raise OutboundRefused(f"{field}: {url!r} {problem}; {VALID}")
    parts = urlsplit(url)
    host, port = str(parts.hostname), _port(parts)
    addresses = resolver(host, port)
    if not addresses:
        raise socket.gaierror(f"{host} resolves to no address")
    allowed = policy.allows(parts)
    for address in addresses:
        problem = address_problem(address)
        if port in policy.deny_ports and _is_local(address):
            raise OutboundRefused(f"{field}: {url!r} reaches port {port} of this machine ({address}), a service of "
                                  f"the platform itself ({DENY_VAR}); no allow-list entry opens it")
        if problem and not allowed:
            raise OutboundRefused(f"{field}: {url!r} resolves to {address}, {problem}; {VALID}")
    return Target(parts, addresses[0])


def precheck(url: str, field: str, *, policy: OutboundPolicy | None = None,
             resolver: Resolver = system_resolver) -> None:
    """check_url at validation: a host that does not resolve here (the web side may not see the cluster's
    names) passes, since each request checks again where it is made; anything else refused raises."""
    with contextlib.suppress(OSError):
        check_url(url, field, policy=policy, resolver=resolver)


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address; the Host header still names the URL's host."""

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(str(target.url.hostname), _port(target.url), timeout=timeout)
        self._create_connection = _pinned(target.address)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As _PinnedHTTPConnection, over TLS: SNI and the certificate check use the URL's host."""

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(str(target.url.hostname), _port(target.url), timeout=timeout,
                         context=ssl.create_default_context())
        self._create_connection = _pinned(target.address)


def _pinned(address: str) -> Callable[..., socket.socket]:
    def connect(where: tuple[str, int], timeout: Any = None, source_address: Any = None) -> socket.socket:
        return socket.create_connection((address, where[1]), timeout, source_address)

    return connect


def failure_reason(exc: BaseException) -> str:
    """A failed connection told without text a server could have sent: the error's kind and errno text."""
    strerror = getattr(exc, "strerror", None)
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timed out"
    return f"{type(exc).__name__}" + (f" ({strerror})" if strerror else "")


def post_json(url: str, body: Mapping[str, Any], field: str, *, timeout_s: float,
              headers: Mapping[str, str] | None = None, policy: OutboundPolicy | None = None,
              resolver: Resolver = system_resolver) -> Any:
    """POST `body` as JSON to `url` after checking it again (check_url), connected to the checked address;
    the decoded JSON answer of a 2xx. Raises OutboundRefused (do not retry: the target is not allowed),
    OutboundFailed with the status of an answer that is not 2xx (or None when none came; only the status and
    its standard phrase are told), or ValueError for a 2xx whose body is not JSON."""
    try:
        target = check_url(url, field, policy=policy, resolver=resolver)
    except OSError as exc:
        raise OutboundFailed(f"{field} {url}: its host does not resolve ({failure_reason(exc)})") from None
    cls = _PinnedHTTPSConnection if target.url.scheme.lower() == "https" else _PinnedHTTPConnection
    connection = cls(target, timeout_s)
    path = target.url.path or "/"
    try:
        connection.request("POST", path, body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json", "Accept": "application/json",
                                    **(headers or {})})
        response = connection.getresponse()
        if not 200 <= response.status < 300:
            raise OutboundFailed(f"HTTP {response.status} {_phrase(response.status)}", response.status)
        raw = response.read(MAX_ANSWER_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise OutboundFailed(f"no answer ({failure_reason(exc)}, timeout {timeout_s:g} s)") from None
    finally:
        connection.close()
    if len(raw) > MAX_ANSWER_BYTES:
        raise ValueError(f"an answer over {MAX_ANSWER_BYTES} bytes")
    return json.loads(raw)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "(non-standard status)"
