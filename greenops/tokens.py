"""Bearer secrets: host tokens, enrollment tokens, team API tokens and invitation links.

Each is 256 random bits behind a short prefix that says what it is (gho_, gen_, gha_, ginv_).
Only the SHA-256 is stored: for secrets this random a slow KDF adds nothing, and a plain digest
lets a request find its row with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import secrets


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
