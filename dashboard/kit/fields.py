"""A text column encrypted at rest, for secrets the code must use again (webhook signing keys,
webhook URLs that carry a token): a database dump or a stray SELECT shows ciphertext only.

Fernet (AES-128-CBC + HMAC-SHA256) with a key derived from AIRBOARD_ENCRYPTION_KEY, else
DJANGO_SECRET_KEY. Rotating that key makes stored values unreadable: set
AIRBOARD_ENCRYPTION_KEY once and keep it when the secret key rotates.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import models

PREFIX = "fernet:"


def _fernet() -> Fernet:
    material = settings.AIRBOARD_ENCRYPTION_KEY or settings.SECRET_KEY
    key = hashlib.sha256(b"airboard-field-encryption:" + material.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(text: str) -> str:
    return PREFIX + _fernet().encrypt(text.encode()).decode()


def decrypt(stored: str) -> str:
    if not stored.startswith(PREFIX):
        return stored  # written before encryption (or empty): readable as it is
    try:
        return _fernet().decrypt(stored[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise ValueError(
            "an encrypted field cannot be read with the current key: was AIRBOARD_ENCRYPTION_KEY "
            "(or DJANGO_SECRET_KEY, without it) changed?"
        ) from None


class EncryptedTextField(models.TextField):
    """Plain `str` in Python, Fernet ciphertext in the database; empty stays empty."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        return value if not value else decrypt(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return value if not value else encrypt(value)
