"""Channel credentials at rest: Fernet (AES-128-CBC + HMAC-SHA256) with a key derived from
ALERTS_CHANNEL_KEY, or SECRET_KEY when that is unset. A webhook secret or a Slack token in an
apprise URL is a credential: a database dump must not hand it out."""

from __future__ import annotations

import base64
import hashlib
import re

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class KeyChanged(ValueError):
    """A stored credential no longer decrypts: ALERTS_CHANNEL_KEY or SECRET_KEY changed."""


def _fernet() -> Fernet:
    secret = settings.ALERTS_CHANNEL_KEY or settings.SECRET_KEY
    key = hashlib.sha256(b"greenops.alerts.channel:" + secret.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode() if plain else ""


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        # The key changed (SECRET_KEY rotated): say so instead of sending to garbage.
        raise KeyChanged("cannot decrypt: ALERTS_CHANNEL_KEY or SECRET_KEY changed") from None


_HOST_IS_ADDRESS = {"http", "https", "json", "jsons", "xml", "xmls", "form", "forms", "ntfy",
                    "ntfys", "mailto", "mailtos"}
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*://)(.*)$", re.I)


def mask(target: str) -> str:
    """Enough to recognise a target, never enough to use it: scheme, host, and the first
    characters of each secret-looking part."""
    if "@" in target and "://" not in target:  # e-mail addresses are not credentials
        return target
    m = _SCHEME.match(target)
    if not m:
        return target[:4] + "…"
    scheme, rest = m.groups()
    rest = rest.split("@", 1)[-1]  # drop user:password@
    host, _, path = rest.partition("/")
    host = host.split("?", 1)[0]
    if scheme.lower().rstrip(":/") not in _HOST_IS_ADDRESS:
        host = host[:3] + "…"  # slack://TokenA/..., tgram://bottoken/...: the "host" is a secret
    parts = [p[:3] + "…" if len(p) > 3 else "…" for p in path.split("/") if p][:3]
    return scheme + host + ("/" + "/".join(parts) if parts else "")
