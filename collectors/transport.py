"""HTTP POSTs to the GreenOps server (stdlib http.client, one kept connection), and what the
answer means.

The classification lives here, in one place, because the shipper and the inventory both
need it: a response is delivered, refused for good, refused for the token, or worth a retry.
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import json
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

from collectors import __version__

USER_AGENT = f"greenops-agent/{__version__}"

DELIVERED = "delivered"  # 200/202: the server has it
AUTH = "auth"  # 401/403: keep the data, the token is wrong (an operator will fix it)
PERMANENT = "permanent"  # other 4xx: this exact request will never be accepted
RETRY = "retry"  # 408/429/5xx/network: try again later


@dataclass(frozen=True)
class Response:
    status: int | None  # None: no HTTP answer at all (refused, timeout, DNS...)
    body: str
    retry_after_s: float | None = None

    @property
    def outcome(self) -> str:
        s = self.status
        if s in (200, 201, 202):
            return DELIVERED
        if s in (401, 403):
            return AUTH
        if s is not None and 400 <= s < 500 and s not in (408, 429):
            return PERMANENT
        return RETRY

    def error_field(self) -> str | None:
        """The ``field`` of a JSON error answer, e.g. ``samples.gpu_index[3]``."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return None
        field = doc.get("field") if isinstance(doc, dict) else None
        return field if isinstance(field, str) else None

    def refused(self) -> list[dict]:
        """The ``refused`` items of an accepted answer (windows stored without these)."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return []
        items = doc.get("refused") if isinstance(doc, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def describe(self) -> str:
        head = f"HTTP {self.status}" if self.status is not None else "no response"
        return f"{head}: {self.body[:500]}" if self.body else head


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After is either delay-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


class HttpTransport:
    """POSTs to one server over one kept connection (HTTP/1.1 keep-alive), reopened on error.

    A connection per POST cost the server a TCP accept, a socket and a request parser for every
    batch: at the agent's batch size (80 samples) gunicorn (gthread, the web server then)
    spent 1.24-1.35 ms of CPU per POST from urllib's connection per POST against 1.16-1.25
    over kept connections (bench/ingest, three pairs on a shared machine). The connection is
    dropped after anything but a clean 2xx/4xx answer read to its end (a network error, a
    timeout, an answer the server marks ``Connection: close``, a 413, after which a server may
    close it without saying so: gunicorn did), and the next call opens a new one. A POST that
    fails to get any answer on a connection that had been idle is sent once more on a fresh one:
    the server may have closed it while it idled (keep-alive timeout, a restart), and every POST
    the agent sends is idempotent (a batch id, an inventory), so a resend can at worst be
    answered "duplicate". Nothing else changes:
    the shipper still keeps every batch in its spool until an answer says it was delivered.

    One lock around each exchange: a connection carries one request at a time, and a flush at
    shutdown may run beside the shipper's thread.
    """

    def __init__(self, server: str, token: str, timeout_s: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._used = False  # the connection has carried an answer (so it may have gone stale)
        self.connections = 0  # opened so far (tests and the bench read it)
        try:
            parts = urllib.parse.urlsplit(self.server)
            self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
            self._prefix = parts.path
            self._url_error = None if self._scheme in ("http", "https") and self._host else (
                f"server URL must be http(s)://host[:port][/path], not {self.server!r}")
        except ValueError as exc:  # a port that is not a number, a bad IPv6 literal
            self._scheme = self._host = self._port = self._prefix = None
            self._url_error = f"bad server URL {self.server!r}: {exc}"
        self._proxy = None if self._url_error else _proxy_for(self._scheme, self._host)

    def post(
        self, path: str, body: bytes, gzipped: bool, timeout_s: float | None = None
    ) -> Response:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        }
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return self._exchange("POST", path, body, headers, timeout_s or self.timeout_s)

    def probe(self, timeout_s: float = 2.0) -> bool:
        """Does the server answer at all? GET /api/v1/time: public, no database, tiny."""
        resp = self._exchange("GET", "/api/v1/time", None, {"User-Agent": USER_AGENT}, timeout_s)
        return resp.status is not None and 200 <= resp.status < 300

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _exchange(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
                  timeout_s: float) -> Response:
        if self._url_error is not None:
            return Response(None, f"ValueError: {self._url_error}")
        with self._lock:
            reused = self._conn is not None and self._used
            try:
                return self._once(method, path, body, headers, timeout_s)
            except STALE as exc:
                self._drop()
                if not reused:
                    return Response(None, f"{type(exc).__name__}: {exc}")
            except (OSError, http.client.HTTPException) as exc:  # timeouts are OSError too
                self._drop()
                return Response(None, f"{type(exc).__name__}: {exc}")
            try:  # the kept connection had been closed by the server: once more, on a new one
                return self._once(method, path, body, headers, timeout_s)
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                return Response(None, f"{type(exc).__name__}: {exc}")

    def _once(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
              timeout_s: float) -> Response:
        conn = self._conn or self._connect(timeout_s)
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        target = self._prefix + path
        if self._proxy is not None and self._scheme == "http":  # a plain proxy: absolute URI
            target = f"http://{_netloc(self._host, self._port)}{target}"
            headers = {**headers, **self._proxy[2]}
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        self._used = True
        try:
            text = _read_text(resp)
        except (OSError, http.client.HTTPException):  # the status came: it is the answer
            text = ""
        # Read to its end and not marked for closing: the connection can carry the next one.
        # 413: the server refused the body unread, and may close the connection although its
        # answer says keep-alive (gunicorn drained at most 64 KiB of it, then closed).
        if not resp.isclosed() or resp.will_close or resp.status == 413:
            self._drop()
        return Response(resp.status, text, parse_retry_after(resp.getheader("Retry-After")))

    def _connect(self, timeout_s: float) -> http.client.HTTPConnection:
        """A new connection, straight or through the proxy the environment names (https_proxy,
        http_proxy, no_proxy: what urllib, which the agent used before, honours)."""
        cls = (http.client.HTTPSConnection if self._scheme == "https"
               else http.client.HTTPConnection)
        if self._proxy is None:
            conn = cls(self._host, self._port, timeout=timeout_s)
        else:
            proxy_host, proxy_port, auth = self._proxy
            conn = cls(proxy_host, proxy_port, timeout=timeout_s)
            if self._scheme == "https":  # CONNECT through the proxy, TLS to the server
                conn.set_tunnel(self._host, self._port, headers=auth)
        self._conn, self._used = conn, False
        self.connections += 1
        return conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._used = False


# No answer on a kept connection: the server closed it while it idled (or before the request
# was read). Worth one resend on a fresh connection; a timeout is not (the server may be busy
# with the request).
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
         ConnectionAbortedError)


def _proxy_for(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """The proxy the environment sets for this server, as urllib reads it: (host, port, the
    Proxy-Authorization header if the proxy URL carries credentials), or None."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not parts.hostname:
        return None
    auth = {}
    if parts.username is not None:
        unquote = urllib.parse.unquote
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return parts.hostname, parts.port or 80, auth


def _netloc(host: str, port: int | None) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if port is None else f"{name}:{port}"


def _read_text(resp: http.client.HTTPResponse) -> str:
    """The answer's body as text: at most 64 KiB (an error page), read to its end when that is
    all of it, so the connection can carry the next request."""
    return resp.read(64 * 1024).decode("utf-8", "replace")
