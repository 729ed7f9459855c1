"""The base of every model of the workload file (runs/workload/models.py): pydantic, in the file's words.

A `Section` is a strict pydantic model (no `"8"` for 8, no `yes` for 1) that refuses unknown keys.
Its wrap validator makes one pass report everything, each problem worded for the file's author:
1. pydantic's errors for this mapping become sentences (`wording`): "must be an integer, got
   'eight'", "unknown key 'num_accelerator' (did you mean 'num_accelerators'?)", "(quote it)"
   for a number where text belongs; unknown keys come first, as the file is read;
2. then the model's cross-field `rules` (exclusive keys, keys that need others), read from the raw
   mapping so they are found even where a field failed, one problem a key at most;
3. all of them go up as one ValidationError of a single error type (WORDED) whose messages are
   final: a parent passes its children's problems on unchanged, under their full location.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import date
from typing import Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, ModelWrapValidatorHandler, ValidationError, model_validator
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from runs.workload.loader import BROKEN, describe

Loc = tuple[str | int, ...]
WORDED = "workload"
# The message of an error about a value the YAML loader could not build: it told the user already.
SAID = ""

# What a value of the wrong type must be, by pydantic's error type.
NOUNS = {
    "string_type": "a string",
    "literal_error": "a string",
    "int_type": "an integer",
    "list_type": "a list of strings",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def worded(message: str) -> PydanticCustomError:
    # The message goes in as context, never as the template: it may hold braces (`{url: ...}`).
    return PydanticCustomError(WORDED, "{message}", {"message": message})


def raise_all(problems: Iterable[tuple[Loc, str]], title: str = "workload") -> None:
    """Raise every (location, message) at once, or nothing when there are none."""
    details = [InitErrorDetails(type=worded(message), loc=loc, input=None) for loc, message in problems]
    if details:
        raise ValidationError.from_exception_data(title, details)


def must(test: Callable[[Any], object], message: str | Callable[[Any], str]) -> AfterValidator:
    """A rule on a value that has its type already: `message` (a "{got}" in it is the value) when `test` fails."""

    def check(value: Any) -> Any:
        if not test(value):
            raise worded(message(value) if callable(message) else message.replace("{got}", describe(value)))
        return value

    return AfterValidator(check)


def present(raw: dict[str, Any], key: str) -> bool:
    """Given a value: `null` for an optional key means "not set"."""
    return raw.get(key) is not None


def exclusive(raw: dict[str, Any], first: str, second: str, why: str = "") -> Iterator[tuple[Loc, str]]:
    if present(raw, first) and present(raw, second):
        yield (second,), f"cannot be given with {first}{why}"


class Section(BaseModel):
    """A mapping of the workload file: unknown keys refused, values read strictly, every problem worded."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        """Cross-field problems (exclusive keys, keys that need others), read from the raw mapping."""
        return iter(())

    @classmethod
    def not_a_mapping(cls, value: Any) -> str:
        return "is required" if value is None else f"must be a mapping, got {describe(value)}"

    @model_validator(mode="wrap")
    @classmethod
    def every_problem(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        model, errors = None, []
        try:
            model = handler(data)
        except ValidationError as exc:
            errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
        # A value YAML could not build is reported already: its error stays, unworded (SAID).
        problems = [(e["loc"], SAID if e["input"] is BROKEN else cls.wording(e)) for e in errors]
        if isinstance(data, dict):
            taken = {loc for loc, _ in problems}  # one problem a key: no rule where the value failed already
            problems += [(loc, message) for loc, message in cls.rules(data) if loc not in taken]
        raise_all(problems, cls.__name__)
        assert model is not None  # failed validation left problems, raised just above
        return model

    @classmethod
    def wording(cls, error: ErrorDetails) -> str:
        """Pydantic's error in the words of the file's author ("must be an integer, got 'eight'")."""
        kind, loc, value = error["type"], error["loc"], error["input"]
        if kind == WORDED:
            return error["ctx"]["message"]
        if not loc:
            return cls.not_a_mapping(value)
        if kind == "extra_forbidden":
            key = str(loc[-1])
            close = difflib.get_close_matches(key, list(cls.model_fields), n=1)
            return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        if kind == "missing" or (value is None and len(loc) == 1):
            return "is required"
        if kind == "greater_than_equal":
            return f"must be at least {error['ctx']['ge']}, got {value}"
        if kind == "literal_error" and isinstance(value, str):
            choices = ", ".join(re.findall(r"'([^']*)'", error["ctx"]["expected"]))
            return f"must be one of {choices}, got {describe(value)}" if value.strip() else "must not be empty"
        field = cls.model_fields.get(str(loc[0])) if len(loc) == 1 else None
        noun = (field and field.description) or NOUNS.get(kind)
        if noun is None:
            return error["msg"]
        hint = " (quote it)" if noun == "a string" and isinstance(value, int | float | date) else ""
        return f"must be {noun}, got {describe(value)}{hint}"
