"""The price book as a CSV file: load (validated, all-or-nothing, idempotent) and export.

One file holds both kinds of price, one row each:

    kind,accelerator_type,region,source_region,destination_region,effective_from,usd_per_hour,usd_per_gb,source
    accelerator,GPU_8xH100,us-west-2,,,2025-06-01,6.88,,https://... (page date)
    egress,,,us-west-2,internet,2024-01-01,,0.09,https://... (page date)

`effective_from` is an ISO date (00:00 UTC that day) or an ISO datetime with an offset. The
default book ships as `billing/data/default_prices.csv`; prices are data, never constants.

Prices that were billed must not change under anyone's feet: a row whose natural key exists
with a different price is refused unless the caller asks to `replace`. A new price is a new
row with a later `effective_from`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from django.db import transaction

from billing.models import AcceleratorPrice, EgressPrice
from runs.choices import AcceleratorType

DEFAULT_PRICE_FILE = Path(__file__).resolve().parent / "data" / "default_prices.csv"

COLUMNS = (
    "kind",
    "accelerator_type",
    "region",
    "source_region",
    "destination_region",
    "effective_from",
    "usd_per_hour",
    "usd_per_gb",
    "source",
)
INTERNET = "internet"
# AWS-style region names ("us-west-2", "us-gov-west-1"): catches typos such as "us-west2"
# while allowing a workspace home region outside the six serverless GPU regions.
_REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d+$")
# The model's DecimalField(max_digits=12, decimal_places=6).
_MAX_DECIMALS = 6
_MAX_PRICE = Decimal(10) ** (12 - _MAX_DECIMALS)
_SOURCE_MAX = AcceleratorPrice._meta.get_field("source").max_length


class PriceKind(StrEnum):
    ACCELERATOR = "accelerator"
    EGRESS = "egress"


@dataclass(frozen=True)
class RowError:
    """A row the loader refused; `line` is the file's line number (the header is line 1)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class LoadResult:
    """What a load did. With any `errors`, nothing was written and the counts are zero."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    errors: list[RowError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class _Row:
    line: int
    kind: PriceKind
    key: tuple[str, str, datetime]  # (type, region) or (source, destination), then effective_from
    price: Decimal
    source: str


# --- Parsing ----------------------------------------------------------------------------


def _parse_effective_from(value: str) -> datetime:
    try:
        return datetime.combine(date.fromisoformat(value), time(), tzinfo=UTC)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"effective_from {value!r} is not an ISO date or datetime") from None
    if parsed.tzinfo is None:
        raise ValueError(f"effective_from {value!r} has no UTC offset; give a date or e.g. {value}+00:00")
    return parsed.astimezone(UTC)


def _parse_price(name: str, value: str) -> Decimal:
    try:
        price = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{name} {value!r} is not a number") from None
    if not price.is_finite() or price < 0:
        raise ValueError(f"{name} {value!r} must be a finite number >= 0")
    if price.normalize().as_tuple().exponent < -_MAX_DECIMALS:
        raise ValueError(f"{name} {value!r} has more than {_MAX_DECIMALS} decimal places")
    if price >= _MAX_PRICE:
        raise ValueError(f"{name} {value!r} is too large (must be below {_MAX_PRICE})")
    return price


def _check_region(name: str, value: str, *, allow_internet: bool) -> None:
    if allow_internet and value == INTERNET:
        return
    if not _REGION_RE.match(value):
        extra = f" or {INTERNET!r}" if allow_internet else ""
        raise ValueError(f"{name} {value!r} is not a region name like 'us-west-2'{extra}")


def _require_blank(row: dict[str, str], names: tuple[str, ...], kind: str) -> None:
    # A value in another kind's column means the row is not what its author thinks it is.
    filled = [n for n in names if row[n]]
    if filled:
        raise ValueError(f"{', '.join(filled)} must be empty on an {kind} row")


def _parse_row(line: int, raw: dict[str | None, Any]) -> _Row:
    if None in raw:
        # DictReader files surplus fields under the key None.
        raise ValueError("more fields than the header has columns")
    row: dict[str, str] = {name: (raw.get(name) or "").strip() for name in COLUMNS}
    if row["kind"] not in set(PriceKind):
        raise ValueError(f"kind {row['kind']!r} must be 'accelerator' or 'egress'")
    if not row["effective_from"]:
        raise ValueError("effective_from is required")
    effective_from = _parse_effective_from(row["effective_from"])
    if len(row["source"]) > _SOURCE_MAX:
        raise ValueError(f"source is {len(row['source'])} characters; at most {_SOURCE_MAX}")

    if row["kind"] == PriceKind.ACCELERATOR:
        _require_blank(row, ("source_region", "destination_region", "usd_per_gb"), row["kind"])
        if row["accelerator_type"] not in AcceleratorType.values:
            raise ValueError(
                f"accelerator_type {row['accelerator_type']!r} is not one of {', '.join(AcceleratorType.values)}"
            )
        _check_region("region", row["region"], allow_internet=False)
        price = _parse_price("usd_per_hour", row["usd_per_hour"])
        key = (row["accelerator_type"], row["region"], effective_from)
        return _Row(line, PriceKind.ACCELERATOR, key, price, row["source"])

    _require_blank(row, ("accelerator_type", "region", "usd_per_hour"), row["kind"])
    _check_region("source_region", row["source_region"], allow_internet=True)
    _check_region("destination_region", row["destination_region"], allow_internet=True)
    if row["source_region"] == row["destination_region"]:
        raise ValueError("source_region and destination_region are the same")
    price = _parse_price("usd_per_gb", row["usd_per_gb"])
    key = (row["source_region"], row["destination_region"], effective_from)
    return _Row(line, PriceKind.EGRESS, key, price, row["source"])


def _parse(file: IO[str]) -> tuple[list[_Row], list[RowError]]:
    """Parse every row, collecting all errors (not just the first) with line numbers."""
    reader = csv.DictReader(file)
    header = reader.fieldnames
    if not header:
        return [], [RowError(1, "the file is empty; expected a header row")]
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        problems = [f"missing column(s) {', '.join(missing)}"] if missing else []
        problems += [f"unknown column(s) {', '.join(unknown)}"] if unknown else []
        return [], [RowError(1, "; ".join(problems))]
    reader.fieldnames = header

    rows: list[_Row] = []
    errors: list[RowError] = []
    first_line: dict[tuple[PriceKind, tuple[str, str, datetime]], int] = {}
    for raw in reader:
        line = reader.line_num
        try:
            row = _parse_row(line, raw)
        except ValueError as exc:
            errors.append(RowError(line, str(exc)))
            continue
        seen = first_line.setdefault((row.kind, row.key), line)
        if seen != line:
            what = "accelerator_type, region" if row.kind == PriceKind.ACCELERATOR else "source and destination regions"
            errors.append(RowError(line, f"same {what} and effective_from as line {seen}"))
            continue
        rows.append(row)
    return rows, errors


# --- Loading ----------------------------------------------------------------------------


@contextmanager
def _open(path_or_file: str | Path | IO[str]) -> Iterator[IO[str]]:
    if isinstance(path_or_file, str | Path):
        # utf-8-sig: a spreadsheet's "Save as CSV" often starts the file with a BOM.
        with open(path_or_file, newline="", encoding="utf-8-sig") as file:
            yield file
    else:
        yield path_or_file


def load_price_csv(path_or_file: str | Path | IO[str], *, replace: bool = False) -> LoadResult:
    """Load a price CSV into AcceleratorPrice and EgressPrice, all or nothing.

    1. Parse and validate every row; collect all errors with their line numbers.
    2. Read the existing prices (the book is tens of rows: one query per kind) and sort each
       row into added, unchanged (same price and source), or changed.
    3. A changed price is an error unless `replace`: a billed price should not move; a new
       price belongs in a new row with a later effective_from. A changed `source` alone is
       an update (it does not touch money).
    4. Any error: write nothing, return the errors. Otherwise insert and update in one
       transaction, so loading the same file twice adds nothing the second time.
    """
    with _open(path_or_file) as file:
        rows, errors = _parse(file)
    result = LoadResult(errors=errors)
    if errors:
        return result

    with transaction.atomic():
        existing = {
            PriceKind.ACCELERATOR: {
                (p.accelerator_type, p.region, p.effective_from): p for p in AcceleratorPrice.objects.all()
            },
            PriceKind.EGRESS: {
                (p.source_region, p.destination_region, p.effective_from): p for p in EgressPrice.objects.all()
            },
        }
        new_accelerator: list[AcceleratorPrice] = []
        new_egress: list[EgressPrice] = []
        changed: dict[PriceKind, list[AcceleratorPrice | EgressPrice]] = {kind: [] for kind in PriceKind}
        for row in rows:
            price_field = "usd_per_hour" if row.kind == PriceKind.ACCELERATOR else "usd_per_gb"
            current = existing[row.kind].get(row.key)
            if current is None:
                if row.kind == PriceKind.ACCELERATOR:
                    new_accelerator.append(
                        AcceleratorPrice(
                            accelerator_type=row.key[0],
                            region=row.key[1],
                            effective_from=row.key[2],
                            usd_per_hour=row.price,
                            source=row.source,
                        )
                    )
                else:
                    new_egress.append(
                        EgressPrice(
                            source_region=row.key[0],
                            destination_region=row.key[1],
                            effective_from=row.key[2],
                            usd_per_gb=row.price,
                            source=row.source,
                        )
                    )
                continue
            old_price = getattr(current, price_field)
            if old_price != row.price and not replace:
                result.errors.append(
                    RowError(
                        row.line,
                        f"{price_field} {row.price} differs from the stored {old_price} for "
                        f"{row.key[0]} {row.key[1]} from {row.key[2]:%Y-%m-%d %H:%M} UTC; "
                        "add a row with a later effective_from, or load with replace",
                    )
                )
            elif old_price != row.price or current.source != row.source:
                setattr(current, price_field, row.price)
                current.source = row.source
                changed[row.kind].append(current)
            else:
                result.unchanged += 1
        if result.errors:
            result.unchanged = 0
            return result

        # ignore_conflicts: a concurrent load of the same file must not fail on the natural
        # key; the loser's "added" count is then an overstatement, which is harmless.
        AcceleratorPrice.objects.bulk_create(new_accelerator, ignore_conflicts=True)
        EgressPrice.objects.bulk_create(new_egress, ignore_conflicts=True)
        if changed[PriceKind.ACCELERATOR]:
            AcceleratorPrice.objects.bulk_update(changed[PriceKind.ACCELERATOR], ["usd_per_hour", "source"])
        if changed[PriceKind.EGRESS]:
            EgressPrice.objects.bulk_update(changed[PriceKind.EGRESS], ["usd_per_gb", "source"])
    result.added = len(new_accelerator) + len(new_egress)
    result.updated = sum(len(objs) for objs in changed.values())
    return result


def load_default_prices(*, replace: bool = False) -> LoadResult:
    """Load the price book shipped with Airboard (`billing/data/default_prices.csv`)."""
    return load_price_csv(DEFAULT_PRICE_FILE, replace=replace)


# --- Export -----------------------------------------------------------------------------


def _format_effective_from(value: datetime) -> str:
    value = value.astimezone(UTC)
    if value.time() == time():
        return value.date().isoformat()
    return value.isoformat()


def _format_price(value: Decimal) -> str:
    # "6.880000" -> "6.88"; format(..., "f") keeps "100" from becoming "1E+2".
    return format(value.normalize(), "f")


def export_price_csv(file: IO[str]) -> int:
    """Write the whole price book to `file` in the load format; returns the rows written."""
    writer = csv.writer(file, lineterminator="\n")
    writer.writerow(COLUMNS)
    count = 0
    for p in AcceleratorPrice.objects.order_by("accelerator_type", "region", "effective_from"):
        writer.writerow(
            [
                PriceKind.ACCELERATOR,
                p.accelerator_type,
                p.region,
                "",
                "",
                _format_effective_from(p.effective_from),
                _format_price(p.usd_per_hour),
                "",
                p.source,
            ]
        )
        count += 1
    for p in EgressPrice.objects.order_by("source_region", "destination_region", "effective_from"):
        writer.writerow(
            [
                PriceKind.EGRESS,
                "",
                "",
                p.source_region,
                p.destination_region,
                _format_effective_from(p.effective_from),
                "",
                _format_price(p.usd_per_gb),
                p.source,
            ]
        )
        count += 1
    return count
