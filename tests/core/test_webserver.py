"""greenops.webserver: the web server's command line and the trusted-proxy rule for REMOTE_ADDR
(what the login and enrollment limits count)."""

from __future__ import annotations

from greenops import webserver


def remote_addr(app, peer: str, forwarded: str | None) -> str:
    environ = {"REMOTE_ADDR": peer, "wsgi.url_scheme": "http"}
    if forwarded:
        environ["HTTP_X_FORWARDED_FOR"] = forwarded
    seen = {}

    def inner(env, start_response):
        seen.update(env)
        return [b""]

    app(inner)(environ, lambda *a: None)
    return seen["REMOTE_ADDR"]


def test_a_trusted_proxy_names_the_client_and_nobody_else_does():
    behind = lambda inner: webserver.behind_proxies(inner, "10.0.0.0/8, 127.0.0.1")  # noqa: E731
    assert remote_addr(behind, "10.1.2.3", "203.0.113.7") == "203.0.113.7"
    # A client's own X-Forwarded-For before the proxy's entry is not believed: the rightmost
    # address that is not a trusted proxy is the client.
    assert remote_addr(behind, "127.0.0.1", "198.51.100.1, 203.0.113.7") == "203.0.113.7"
    # A peer that is not a trusted proxy cannot choose the address a limit counts.
    assert remote_addr(behind, "192.0.2.9", "203.0.113.7") == "192.0.2.9"


def test_without_trusted_proxies_the_peer_is_the_client(monkeypatch):
    monkeypatch.delenv("WEB_FORWARDED_ALLOW_IPS", raising=False)
    assert remote_addr(webserver.behind_proxies, "192.0.2.9", "203.0.113.7") == "192.0.2.9"


def test_command_line_follows_the_environment():
    words = webserver.argv(env={"WEB_CONCURRENCY": "6", "WEB_THREADS": "3",
                                "WEB_BIND": "0.0.0.0:8000", "WEB_ACCESS_LOG": "1"})
    assert words[words.index("--workers") + 1] == "6"
    assert words[words.index("--blocking-threads") + 1] == "3"
    assert (words[words.index("--host") + 1], words[words.index("--port") + 1]) == (
        "0.0.0.0", "8000")
    assert "--access-log" in words and "--respawn-failed-workers" in words
    assert "--access-log" not in webserver.argv(env={})
    ipv6 = webserver.argv(bind="[::1]:9000", env={})
    assert ipv6[ipv6.index("--host") + 1] == "::1"
