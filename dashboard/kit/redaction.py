"""One redactor for text that may quote a credential: collector errors, command lines, CLI output.

`redact(text)` replaces the secret part and keeps the rest readable ("--password=***",
"https://***@host/path?***"). Every pattern is linear: no nested quantifiers, bounded
repeats, and the input is cut to MAX_CHARS first, so hostile text costs a bounded pass.
"""

from __future__ import annotations

import re

# Longer text is cut before any pattern runs: an error worth showing is never this long.
MAX_CHARS = 20_000

_NAMES = r"(?:access[_-]?key|private[_-]?key|access[_-]?token|refresh[_-]?token|id[_-]?token|token|password|passwd|pwd|secret|client[_-]?secret|api[_-]?key|apikey|signature)"  # noqa: E501
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # URL userinfo: scheme://user:password@host
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]{0,20}://)[^\s/@]{1,512}@"), r"\1***@"),
    # URL query strings: anything after '?' in a URL may be a token.
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]{0,20}://[^\s?#\"']{0,2048}\?)[^\s\"'#]+"), r"\1***"),
    # Credential flags: --password=x, --token x, --api-key=x, -p x is left (it is the profile).
    (re.compile(r"(--[a-zA-Z-]{0,30}" + _NAMES + r"[= ]+)[^\s\"']+", re.IGNORECASE), r"\1***"),
    # Headers: Authorization: Bearer x, X-Api-Key: x, Cookie: x (in curl -H "..." or a dump).
    (
        re.compile(
            r"((?:Authorization|Proxy-Authorization|X-[a-zA-Z-]{0,30}(?:Key|Token|Secret)|Api-Key|Cookie)[\"']?\s*[:=]\s*"
            r"[\"']?(?:Bearer\s+|Basic\s+|Token\s+)?)[^\s\"',]+",
            re.IGNORECASE,
        ),
        r"\1***",
    ),
    (re.compile(r"(\bBearer\s+)[^\s\"',]+", re.IGNORECASE), r"\1***"),
    # curl's user and password: --user name:password, -u name:password (the name stays).
    (re.compile(r"((?:--user|--proxy-user|(?<![\w-])-u)(?:=|\s+)[\"']?[^\s:\"']{1,256}:)[^\s\"']+"), r"\1***"),
    # name=value and NAME=value: access_token=x, DATABRICKS_TOKEN=x, password: x
    (re.compile(r"(\b[A-Za-z_]{0,40}" + _NAMES + r"[\"']?\s*[=:]\s*[\"']?)[^\s&\"',;]+", re.IGNORECASE), r"\1***"),
    # Token shapes that need no name: Databricks PATs, our API keys, Hugging Face, GitHub, Slack, OpenAI.
    (
        re.compile(
            r"\b(?:dapi[0-9a-zA-Z-]{8,}|ab_[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
            r"|xox[abpr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,})"
        ),
        "***",
    ),
    # AWS access key ids (AKIA long-term, ASIA temporary): 20 characters, no name needed.
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "***"),
    # A bare JWT (an OAuth or Databricks OIDC token): header.payload.signature, base64url.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "***"),
)


def redact(text: str) -> str:
    """`text` with every credential it may quote replaced by '***' (cut to MAX_CHARS first)."""
    text = text[:MAX_CHARS]
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
