"""The outbound guard: webhooks and apprise URLs never reach loopback, private, link-local or
metadata addresses, never follow redirects and never echo what answered.

Real receivers listen on 127.0.0.1 only. Every other address is judged by the guard's decision
before any connection: the `outbound_connects` fixture (tests/conftest.py) records each connect
the guard lets through and refuses anything off loopback, so these tests cannot send a packet
beyond the machine even if the guard were wrong -- and the recorded list shows whether it was.
"""

from __future__ import annotations

import datetime as dt
import socket

import pytest

from greenops import outbound
from greenops.alerts import channels, evaluate, notify
from greenops.errors import FieldError
from tests.support.alerts import NOW, Receiver, hour, make_rule, rollup

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "::1", "0.0.0.0", "::",                       # loopback, unspecified
    "10.0.0.1", "172.16.5.4", "172.31.255.255", "192.168.1.1", "fc00::1", "fd12::5",  # private
    "169.254.169.254", "169.254.0.1", "fe80::1", "fe80::1%eth0",              # link-local
    "fd00:ec2::254", "100.100.100.200", "192.0.0.192",                         # metadata
    "100.64.0.1", "100.127.255.254",                                           # CGNAT
    "224.0.0.1", "239.255.255.250", "ff02::1",                                 # multicast
    "240.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.2.10",                # reserved, test
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",       # embedded IPv4
    "2002:a9fe:a9fe::1",                                                       # 6to4 of metadata
])
def test_inside_addresses_are_refused(address):
    assert outbound.decide(address).allowed is False


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111",
                                     "100.128.0.1"])  # just past CGNAT's /10
def test_public_addresses_are_allowed(address):
    assert outbound.decide(address).allowed is True


def test_operator_allows_named_ranges_but_never_metadata(settings):
    settings.GREENOPS_OUTBOUND_ALLOW = ["10.20.0.0/16", "169.254.0.0/16"]
    assert outbound.decide("10.20.3.4").allowed
    assert not outbound.decide("10.21.0.1").allowed  # outside the /16: still private
    assert outbound.decide("169.254.1.1").allowed
    d = outbound.decide("169.254.169.254")
    assert (d.allowed, d.reason) == (False, "cloud instance metadata address")


def firing_webhook(team, url: str):
    ch, secret = channels.create(team, {"name": "hook", "kind": "webhook", "target": url})
    rule = make_rule(team, [ch])
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3 J per inference > 2 J
    evaluate.run(rule, NOW)
    return ch, secret


def test_loopback_receiver_is_refused_by_default_and_reached_when_allowed(
        team, settings, monkeypatch, outbound_connects):
    fake_dns(monkeypatch, {"receiver.test": [["127.0.0.1"]]})
    with Receiver() as rx:
        # A host name, so the save-time check (IP literals only) lets it through and the
        # send-time guard is what refuses it.
        ch, _ = firing_webhook(team, f"http://receiver.test:{rx.port}/hook")
        [n] = notify.deliver(ch)
        assert (n.status, n.error) == ("pending", outbound.UNREACHABLE)
        assert rx.requests == [] and outbound_connects == []  # refused before any connect

        settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
        [n] = notify.deliver(ch, now=n.next_attempt_at + dt.timedelta(seconds=1))
    assert n.status == "sent" and len(rx.requests) == 1
    assert outbound_connects == [("127.0.0.1", rx.port)]


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/",
                                 "http://127.0.0.1:8000/", "https://[::1]/x",
                                 "http://10.0.0.5/hook", "http://localhost:9000/",
                                 "http://[fd00:ec2::254]/"])
def test_inside_literal_urls_are_refused_when_the_channel_is_saved(team, url, outbound_connects):
    with pytest.raises(FieldError) as exc:
        channels.create(team, {"name": "x", "kind": "webhook", "target": url})
    assert exc.value.field == "target" and "not sent inside the network" in exc.value.message
    assert outbound_connects == []


def fake_dns(monkeypatch, answers: dict[str, list[list[str]]]) -> list[str]:
    """getaddrinfo that answers from `answers` (a list of successive answers per name, the
    last one repeating) and records each lookup."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:  # an IP literal: the real call does no lookup
            return real(host, port, *args, **kwargs)
        asked.append(host)
        seq = answers[host]
        addrs = seq[min(asked.count(host), len(seq)) - 1]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port)) for a in addrs]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_name_resolving_to_metadata_is_refused_before_any_connect(team, monkeypatch,
                                                                   outbound_connects):
    ch, _ = firing_webhook(team, "http://metadata.attacker.example/hook")
    fake_dns(monkeypatch, {"metadata.attacker.example": [["169.254.169.254"]]})
    [n] = notify.deliver(ch)
    assert n.error == outbound.UNREACHABLE and outbound_connects == []


def test_one_private_answer_refuses_the_whole_name(team, monkeypatch, outbound_connects):
    ch, _ = firing_webhook(team, "http://mixed.example/hook")
    fake_dns(monkeypatch, {"mixed.example": [["93.184.216.34", "10.0.0.5"]]})
    [n] = notify.deliver(ch)
    assert n.error == outbound.UNREACHABLE and outbound_connects == []


def test_rebinding_cannot_change_the_address_after_the_check(team, monkeypatch,
                                                           outbound_connects):
    # First answer public, every later answer loopback: a client that looked the name up
    # again after the check would connect inside. The guard looks it up once and connects to
    # the address it checked (the stub then refuses it: it is not loopback, nothing leaves).
    ch, _ = firing_webhook(team, "http://rebind.example/hook")
    asked = fake_dns(monkeypatch, {"rebind.example": [["93.184.216.34"], ["127.0.0.1"]]})
    [n] = notify.deliver(ch)
    assert asked == ["rebind.example"]
    assert outbound_connects == [("93.184.216.34", 80)]
    assert n.error == outbound.UNREACHABLE


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_a_failed_delivery_not_followed(team, settings, status):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    with Receiver(status=status, headers={"Location": "http://169.254.169.254/"}) as rx:
        ch, _ = firing_webhook(team, rx.url + "/hook")
        [n] = notify.deliver(ch)
    assert len(rx.requests) == 1 and rx.requests[0][3] == "POST"
    assert n.status == "pending"  # retried with backoff, then failed: never marked sent
    assert n.error == f"HTTP {status} from the webhook: redirects are not followed; give the " \
                      "final URL"


def test_errors_never_echo_the_answer_and_read_alike_refused_or_filtered(
        team, settings, monkeypatch):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    with Receiver(status=500, body=b"postgres 15.4 on db-internal-7: SECRET banner") as rx:
        ch, _ = firing_webhook(team, rx.url + "/hook")
        [n] = notify.deliver(ch)
    assert n.error == "HTTP 500 from the webhook" and "SECRET" not in n.error
    # Closed port (refused by the host) and a stubbed timeout (filtered) and the guard's own
    # refusal all read the same.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    errors = []
    fake_dns(monkeypatch, {"receiver.test": [["127.0.0.1"]]})
    for target in (f"http://127.0.0.1:{port}/", "http://receiver.test:1/"):
        settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"] if "127" in target else []
        c, _ = channels.create(team, {"name": f"c{len(errors)}", "kind": "webhook",
                                      "target": target})
        with pytest.raises(channels.TransportError) as exc:
            channels.transport_for(c).send(channels.Message("t", "x", {}))
        errors.append(exc.value.message)

    def timeout(sock, address):
        raise TimeoutError("timed out")

    monkeypatch.setattr(outbound, "_raw_connect", timeout)
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    with pytest.raises(channels.TransportError) as exc:
        channels.transport_for(c).send(channels.Message("t", "x", {}))
    errors.append(exc.value.message)
    assert errors == [outbound.UNREACHABLE] * 3


def apprise_channel(team, url: str):
    ch, _ = channels.create(team, {"name": "ap", "kind": "apprise", "target": url})
    return ch


def test_apprise_is_guarded_refused_by_default_delivered_when_allowed(
        team, settings, monkeypatch, outbound_connects):
    fake_dns(monkeypatch, {"receiver.test": [["127.0.0.1"]]})
    with Receiver() as rx:
        ch = apprise_channel(team, f"json://receiver.test:{rx.port}/hook")
        with pytest.raises(channels.TransportError) as exc:
            channels.transport_for(ch).send(channels.Message("t", "body", {}))
        assert exc.value.message == f"apprise: {outbound.UNREACHABLE}"
        assert rx.requests == [] and outbound_connects == []
        settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
        channels.transport_for(ch).send(channels.Message("t", "body", {}))
    assert len(rx.requests) == 1


def test_apprise_redirect_to_metadata_is_refused_at_the_connect(team, settings,
                                                                outbound_connects):
    # requests (inside apprise) follows the 307 itself; the guard sees its second connect.
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    with Receiver(status=307, headers={"Location": "http://169.254.169.254/latest/"}) as rx:
        ch = apprise_channel(team, f"json://127.0.0.1:{rx.port}/hook")
        with pytest.raises(channels.TransportError):
            channels.transport_for(ch).send(channels.Message("t", "body", {}))
    assert len(rx.requests) == 1
    assert all(a[0] != "169.254.169.254" for a in outbound_connects)


def test_apprise_name_to_private_address_is_refused(team, monkeypatch, outbound_connects):
    ch = apprise_channel(team, "json://intranet.example/hook")
    fake_dns(monkeypatch, {"intranet.example": [["192.168.10.20"]]})
    with pytest.raises(channels.TransportError):
        channels.transport_for(ch).send(channels.Message("t", "body", {}))
    assert outbound_connects == []


def test_the_guard_leaves_other_sockets_alone(team):
    # The database connection (loopback PostgreSQL) works inside and outside the guard only
    # because guard() checks the thread that asked for it: here, a query after a guarded send.
    with outbound.guard():
        pass
    assert team.__class__.objects.filter(id=team.id).exists()


def self_signed(tmp_path, name: str):
    """A certificate for `name` (its own CA), written as PEM: (cert path, key path)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_https_webhook_connects_to_the_vetted_address_with_the_name_for_sni_and_host(
        team, settings, monkeypatch, tmp_path, outbound_connects):
    import ssl

    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    cert, key = self_signed(tmp_path, "receiver.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust it as the default context's CA
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    sni: list[str] = []
    ctx.sni_callback = lambda sock, name, _ctx: sni.append(name)
    with Receiver() as rx:
        rx.server.socket = ctx.wrap_socket(rx.server.socket, server_side=True)
        fake_dns(monkeypatch, {"receiver.test": [["127.0.0.1"]]})
        ch, _ = firing_webhook(team, f"https://receiver.test:{rx.port}/tls")
        [n] = notify.deliver(ch)
    assert n.status == "sent", n.error
    assert outbound_connects == [("127.0.0.1", rx.port)]  # the vetted address
    assert sni == ["receiver.test"]  # the certificate was checked for the name
    assert rx.requests[0][1]["Host"] == f"receiver.test:{rx.port}"
