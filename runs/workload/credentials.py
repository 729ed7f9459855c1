"""Spotting literal credentials in workload values, without ever repeating them.

A workload file is stored and shown once it is accepted, so a token pasted into
`env_variables` or `parameters` would leak to everyone who can see the run. The CLI offers
`secrets` (name -> scope/key) for exactly this; these detectors point people there.

Two kinds of evidence:
1. The value has the shape of a known key (AWS, Databricks, Hugging Face, GitHub, OpenAI-style,
   Google, Azure storage, PEM private keys, Slack, URLs with a password). These prefixes are
   distinctive enough to search for anywhere inside a value.
2. The name ends in a secret word (HF_TOKEN, DB_PASSWORD, WANDB_API_KEY...) and the value is a
   long, mixed, high-entropy literal: not a reference, a placeholder, a path or a URL. The name
   alone is not enough: TOKENIZERS_PARALLELISM, MAX_NEW_TOKENS and TOKEN_LIMIT are settings.

Callers get a label ("a Hugging Face token"), never the matched text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


def _mixed_case_and_digits(token: str) -> bool:
    return any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token)


def _password_is_literal(token: str) -> bool:
    # `postgres://u:$DB_PASSWORD@host` and `{{secrets/...}}` are expanded at run time: fine.
    password = token.split("://", 1)[1].split(":", 1)[1].rstrip("@")
    return not password.startswith(("$", "{", "%"))


@dataclass(frozen=True)
class _Shape:
    label: str
    regex: re.Pattern[str]
    # A second look at the matched text, for shapes whose prefix alone could be ordinary words.
    confirm: Callable[[str], bool] | None = None


_SHAPES = (
    _Shape("an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
    _Shape(
        "a Databricks personal access token",
        re.compile(r"(?<![A-Za-z0-9])dapi[0-9a-f]{32}(?:-\d+)?(?![0-9a-f])"),
    ),
    _Shape("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")),
    _Shape(
        "a GitHub token",
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ),
    # `sk-` starts ordinary words too (sk-learn-style names), so demand a key's mixed alphabet.
    _Shape(
        "an OpenAI-style API key",
        re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}"),
        _mixed_case_and_digits,
    ),
    _Shape("a Google API key", re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")),
    _Shape(
        "an Azure storage connection string",
        re.compile(r"(?i)(?:AccountKey|SharedAccessKey)=[A-Za-z0-9+/]{20,}"),
    ),
    _Shape("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")),
    _Shape("a Slack token", re.compile(r"(?<![A-Za-z0-9])xox[baprs]-[A-Za-z0-9-]{10,}")),
    _Shape(
        "a URL with an embedded password",
        # Matched from the start of a run of scheme characters only: without the look-behind
        # every letter of a long word began an attempt that scanned to the word's end (quadratic).
        re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z0-9+.-]+://[^/\s:@]+:[^/\s@]+@"),
        _password_is_literal,
    ),
)

# AWS secret access keys have no prefix: 40 base64-ish characters, recognisable only by name.
_AWS_SECRET = re.compile(r"[A-Za-z0-9/+]{40}")
_AWS_SECRET_NAME = re.compile(r"(?i)secret|aws.*secret")

# Words that, ending a name, say "this holds a credential". Only the end counts: HF_TOKEN and
# hfAuthToken hold tokens, TOKEN_LIMIT, SECRET_SCOPE and PASSWORD_FILE hold facts about one.
# Word endings count too (AUTHTOKEN), but TOKENIZERS_PARALLELISM and MAX_NEW_TOKENS do not.
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "APIKEY", "ACCESSKEY", "PRIVATEKEY")
_SECRET_PAIRS = (("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY"), ("AUTH", "KEY"))
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

_PLACEHOLDERS = frozenset(
    {"changeme", "change-me", "change_me", "replaceme", "replace-me", "replace_me", "todo", "tbd", "none", "null"}
    | {"dummy", "example", "redacted", "placeholder", "your-token-here", "your_token_here", "secret", "password"}
)
# Values that are clearly not the credential itself: run-time references, paths, URLs, and
# upper-case names of other variables (API_KEY_ENV: OPENAI_API_KEY).
# A `{{...}}` template is found with str.find in `_is_template`: as a pattern (`\{\{.*\}\}`)
# each `{{` of a long value began a scan to its end (quadratic).
_NOT_LITERAL = re.compile(
    r"^\$|^%\(|^<.*>$|^[./~]|^[a-z][a-z0-9+.-]*:/|^[A-Z][A-Z0-9_]*$|^(.)\1*$",
)


def _is_template(value: str) -> bool:
    opening = value.find("{{")
    return opening >= 0 and value.find("}}", opening + 2) >= 0


MIN_LITERAL_LENGTH = 12
# Bits per character: random keys score 4+, English-ish names and repeated patterns score lower.
MIN_ENTROPY = 3.0


def name_says_secret(name: str) -> bool:
    """Whether a variable or parameter name announces a credential (HF_TOKEN, dbPassword)."""
    words = [w.upper() for w in _WORD.findall(name)]
    while words and words[-1].isdigit():  # HF_TOKEN_2 is still a token
        words.pop()
    if not words:
        return False
    return words[-1].endswith(_SECRET_WORDS) or tuple(words[-2:]) in _SECRET_PAIRS


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def looks_like_literal_secret(value: str) -> bool:
    """Whether a value under a secret-sounding name is itself the secret (long, mixed, random)."""
    value = value.strip()
    if len(value) < MIN_LITERAL_LENGTH or any(c.isspace() for c in value):
        return False
    if value.lower() in _PLACEHOLDERS or _is_template(value) or _NOT_LITERAL.search(value):
        return False
    letters = any(c.isalpha() for c in value)
    digits = any(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    if not ((letters and digits) or mixed_case):
        return False
    return _entropy(value) >= MIN_ENTROPY


def known_shape(value: str, name: str | None = None) -> str | None:
    """The label of a recognised key shape found in `value` (anywhere in it), or None."""
    for shape in _SHAPES:
        for match in shape.regex.finditer(value):
            if shape.confirm is None or shape.confirm(match.group(0)):
                return shape.label
    if name and _AWS_SECRET_NAME.search(name):
        stripped = value.strip()
        if _AWS_SECRET.fullmatch(stripped) and _mixed_case_and_digits(stripped):
            return "an AWS secret access key"
    return None


def describe_credential(value: str, name: str | None = None) -> str | None:
    """What credential `value` (held under `name`) looks like, as a label; None when it looks safe.

    The label never contains any part of the value, so it can go into messages and logs.
    """
    label = known_shape(value, name)
    if label is None and name and name_says_secret(name) and looks_like_literal_secret(value):
        label = "a literal credential"
    return label
