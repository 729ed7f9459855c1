"""The price book as a CSV file: load (validated, all-or-nothing, idempotent) and export.

One file holds both kinds of price, one row each:

    kind,accelerator_type,region,source_region,destination_region,effective_from,usd_per_hour,usd_per_gb,source,instance_type,price_kind,usd_per_gb_processing
    accelerator,GPU_8xH100,us-west-2,,,2025-06-01,6.88,,https://... (page date),,list,
    egress,,,us-west-2,internet,2024-01-01,,0.09,https://... (page date),,,0.045
    instance,,,,,2025-01-01,39.33,,https://... (page date),p5.48xlarge,,

The last three columns are optional in a file (older files lack them): `instance_type` for
classic cluster instance-hour prices (`region` blank = any region), `price_kind` (`list`, the
default, or `negotiated`) on accelerator rows, and `usd_per_gb_processing` on egress rows.

`effective_from` is an ISO date (00:00 UTC that day) or an ISO datetime with an offset. The
default book ships as `billing/data/default_prices.csv`; prices are data, never constants.

Prices that were billed must not change under anyone's feet: a row whose natural key exists
with a different price is refused unless the caller asks to `replace`. A new price is a new
row with a later `effective_from`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from django.contrib.auth.models import User
from django.db import models, transaction

from billing.choices import PriceKind
from billing.models import AcceleratorPrice, EgressPrice, InstancePrice
from billing.prices import history
from dashboard.kit import regions
from dashboard.kit.csv_export import TextSink, unescape, write_csv
from runs.choices import AcceleratorType

DEFAULT_PRICE_FILE = Path(__file__).resolve().parent.parent / "data" / "default_prices.csv"

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
    "instance_type",
    "price_kind",
    "usd_per_gb_processing",
)
# Files written before instance prices existed lack these; they read as blank.
OPTIONAL_COLUMNS = ("instance_type", "price_kind", "usd_per_gb_processing")
# EC2-style instance type names: "p5.48xlarge", "g5.xlarge", "Standard_ND96isr_H100_v5".
_INSTANCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The model's DecimalField(max_digits=12, decimal_places=6).
_MAX_DECIMALS = 6
_MAX_PRICE = Decimal(10) ** (12 - _MAX_DECIMALS)
_SOURCE_MAX: int = AcceleratorPrice._meta.get_field("source").max_length  # type: ignore[assignment]  # a CharField's, set


class PriceTable(StrEnum):
    """Which price table a row of the price file goes to (its `kind` column)."""

    ACCELERATOR = "accelerator"
    EGRESS = "egress"
    INSTANCE = "instance"


@dataclass(frozen=True)
class _Spec:
    model: type[models.Model]
    key: tuple[str, ...]  # natural key fields, effective_from last
    prices: tuple[str, ...]


SPECS = {
    PriceTable.ACCELERATOR: _Spec(
        AcceleratorPrice, ("accelerator_type", "region", "kind", "effective_from"), ("usd_per_hour",)
    ),
    PriceTable.EGRESS: _Spec(
        EgressPrice, ("source_region", "destination_region", "effective_from"), ("usd_per_gb", "usd_per_gb_processing")
    ),
    PriceTable.INSTANCE: _Spec(InstancePrice, ("instance_type", "region", "effective_from"), ("usd_per_hour",)),
}


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
    kind: PriceTable
    key: tuple[Any, ...]  # the kind's natural key (SPECS), effective_from last
    prices: dict[str, Decimal]
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
    exponent = price.normalize().as_tuple().exponent  # an int: the price is finite
    if isinstance(exponent, int) and exponent < -_MAX_DECIMALS:
        raise ValueError(f"{name} {value!r} has more than {_MAX_DECIMALS} decimal places")
    if price >= _MAX_PRICE:
        raise ValueError(f"{name} {value!r} is too large (must be below {_MAX_PRICE})")
    return price


def _check_region(name: str, value: str, *, allow_internet: bool) -> None:
    problem = regions.region_problem(value, allow_internet=allow_internet)
    if problem:
        raise ValueError(f"{name} {problem}")


def _require_blank(row: dict[str, str], names: tuple[str, ...], kind: str) -> None:
    # A value in another kind's column means the row is not what its author thinks it is.
    filled = [n for n in names if row[n]]
    if filled:
        raise ValueError(f"{', '.join(filled)} must be empty on an {kind} row")


def _parse_row(line: int, raw: dict[str | None, Any]) -> _Row:
    if None in raw:
        # DictReader files surplus fields under the key None.
        raise ValueError("more fields than the header has columns")
    row: dict[str, str] = {name: unescape((raw.get(name) or "").strip()) for name in COLUMNS}
    if row["kind"] not in set(PriceTable):
        raise ValueError(f"kind {row['kind']!r} must be 'accelerator', 'egress' or 'instance'")
    if not row["effective_from"]:
        raise ValueError("effective_from is required")
    effective_from = _parse_effective_from(row["effective_from"])
    if len(row["source"]) > _SOURCE_MAX:
        raise ValueError(f"source is {len(row['source'])} characters; at most {_SOURCE_MAX}")

    if row["kind"] == PriceTable.ACCELERATOR:
        _require_blank(
            row,
            ("source_region", "destination_region", "usd_per_gb", "instance_type", "usd_per_gb_processing"),
            row["kind"],
        )
        if row["accelerator_type"] not in AcceleratorType.values:
            raise ValueError(
                f"accelerator_type {row['accelerator_type']!r} is not one of {', '.join(AcceleratorType.values)}"
            )
        _check_region("region", row["region"], allow_internet=False)
        kind = row["price_kind"] or PriceKind.LIST
        if kind not in PriceKind.values:
            raise ValueError(f"price_kind {kind!r} must be 'list' or 'negotiated'")
        price = _parse_price("usd_per_hour", row["usd_per_hour"])
        key: tuple[Any, ...] = (row["accelerator_type"], row["region"], kind, effective_from)
        return _Row(line, PriceTable.ACCELERATOR, key, {"usd_per_hour": price}, row["source"])

    if row["kind"] == PriceTable.INSTANCE:
        _require_blank(
            row,
            (
                "accelerator_type",
                "source_region",
                "destination_region",
                "usd_per_gb",
                "price_kind",
                "usd_per_gb_processing",
            ),
            row["kind"],
        )
        if not _INSTANCE_RE.match(row["instance_type"]):
            raise ValueError(f"instance_type {row['instance_type']!r} is not an instance type like 'p5.48xlarge'")
        if row["region"]:
            _check_region("region", row["region"], allow_internet=False)
        price = _parse_price("usd_per_hour", row["usd_per_hour"])
        key = (row["instance_type"], row["region"], effective_from)
        return _Row(line, PriceTable.INSTANCE, key, {"usd_per_hour": price}, row["source"])

    _require_blank(row, ("accelerator_type", "region", "usd_per_hour", "instance_type", "price_kind"), row["kind"])
    _check_region("source_region", row["source_region"], allow_internet=True)
    _check_region("destination_region", row["destination_region"], allow_internet=True)
    if row["source_region"] == row["destination_region"]:
        raise ValueError("source_region and destination_region are the same")
    prices = {"usd_per_gb": _parse_price("usd_per_gb", row["usd_per_gb"])}
    prices["usd_per_gb_processing"] = (
        _parse_price("usd_per_gb_processing", row["usd_per_gb_processing"])
        if row["usd_per_gb_processing"]
        else Decimal(0)
    )
    key = (row["source_region"], row["destination_region"], effective_from)
    return _Row(line, PriceTable.EGRESS, key, prices, row["source"])


def _parse(file: IO[str]) -> tuple[list[_Row], list[RowError]]:
    """Parse every row, collecting all errors (not just the first) with line numbers."""
    reader = csv.DictReader(file)
    header = reader.fieldnames
    if not header:
        return [], [RowError(1, "the file is empty; expected a header row")]
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in header and c not in OPTIONAL_COLUMNS]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        problems = [f"missing column(s) {', '.join(missing)}"] if missing else []
        problems += [f"unknown column(s) {', '.join(unknown)}"] if unknown else []
        return [], [RowError(1, "; ".join(problems))]
    reader.fieldnames = header

    rows: list[_Row] = []
    errors: list[RowError] = []
    first_line: dict[tuple[PriceTable, tuple[Any, ...]], int] = {}
    for raw in reader:
        line = reader.line_num
        try:
            row = _parse_row(line, raw)
        except ValueError as exc:
            errors.append(RowError(line, str(exc)))
            continue
        seen = first_line.setdefault((row.kind, row.key), line)
        if seen != line:
            what = {
                PriceTable.ACCELERATOR: "accelerator_type, region",
                PriceTable.EGRESS: "source and destination regions",
                PriceTable.INSTANCE: "instance_type, region",
            }[row.kind]
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


def load_price_csv(
    path_or_file: str | Path | IO[str],
    *,
    replace: bool = False,
    dry_run: bool = False,
    user: User | None = None,
    note: str = "CSV import",
    progress: Callable[[int, int], None] | None = None,
) -> LoadResult:
    """Load a price CSV into the price book, all or nothing, with a history line per change.

    1. Parse and validate every row; collect all errors with their line numbers.
    2. Read the existing prices (the book is tens of rows: one query per kind) and sort each
       row into added, unchanged (same prices and source), or changed.
    3. A changed price is an error unless `replace`: a billed price should not move; a new
       price belongs in a new row with a later effective_from. A changed `source` alone is
       an update (it does not touch money).
    4. Any error: write nothing, return the errors. Otherwise insert and update in one
       transaction, so loading the same file twice adds nothing the second time, and write
       a PriceChange per new or changed field (`user` None for the command line).
    5. `dry_run`: do all of it, report the counts, then roll the transaction back.

    `progress(done, total)` is called as rows are compared (load_prices draws a bar with it).
    """
    with _open(path_or_file) as file:
        rows, errors = _parse(file)
    result = LoadResult(errors=errors)
    if errors:
        return result

    with transaction.atomic():
        # Per kind, its price rows (the kind's model: fields read by name) by natural key.
        existing: dict[PriceTable, dict[tuple[Any, ...], Any]] = {
            kind: {tuple(getattr(p, f) for f in spec.key): p for p in spec.model._default_manager.all()}
            for kind, spec in SPECS.items()
        }
        new: dict[PriceTable, list[models.Model]] = {kind: [] for kind in PriceTable}
        changed: dict[PriceTable, list[tuple[models.Model, dict[str, str]]]] = {kind: [] for kind in PriceTable}
        for done, row in enumerate(rows, 1):
            if progress is not None:
                progress(done, len(rows))
            spec = SPECS[row.kind]
            current = existing[row.kind].get(row.key)
            if current is None:
                fields = dict(zip(spec.key, row.key, strict=True))
                new[row.kind].append(spec.model(**fields, **row.prices, source=row.source))
                continue
            differing = [name for name in spec.prices if getattr(current, name) != row.prices[name]]
            if differing and not replace:
                name = differing[0]
                what = " ".join(str(part) for part in row.key[:-1] if part and part != PriceKind.LIST)
                result.errors.append(
                    RowError(
                        row.line,
                        f"{name} {row.prices[name]} differs from the stored {getattr(current, name)} for "
                        f"{what} from {row.key[-1]:%Y-%m-%d %H:%M} UTC; "
                        "add a row with a later effective_from, or load with replace",
                    )
                )
            elif differing or current.source != row.source:
                before = history.snapshot(current)
                for name, value in row.prices.items():
                    setattr(current, name, value)
                current.source = row.source
                changed[row.kind].append((current, before))
            else:
                result.unchanged += 1
        if result.errors:
            result.unchanged = 0
            return result

        for kind, spec in SPECS.items():
            # ignore_conflicts: a concurrent load of the same file must not fail on the natural
            # key; the loser's "added" count is then an overstatement, which is harmless.
            spec.model._default_manager.bulk_create(new[kind], ignore_conflicts=True)
            if changed[kind]:
                spec.model._default_manager.bulk_update([obj for obj, _ in changed[kind]], [*spec.prices, "source"])
        _record_history(new, changed, user, note)
        result.added = sum(len(objs) for objs in new.values())
        result.updated = sum(len(objs) for objs in changed.values())
        if dry_run:
            transaction.set_rollback(True)
    return result


def _record_history(
    new: dict[PriceTable, list[models.Model]],
    changed: dict[PriceTable, list[tuple[models.Model, dict[str, str]]]],
    user: User | None,
    note: str,
) -> None:
    # bulk_create with ignore_conflicts sets no primary keys: read the new rows back by key.
    entries: list[tuple[models.Model, dict[str, str] | None]] = []
    for kind, spec in SPECS.items():
        if new[kind]:
            wanted = {tuple(getattr(obj, f) for f in spec.key) for obj in new[kind]}
            stored = spec.model._default_manager.filter(effective_from__in={key[-1] for key in wanted})
            entries += [(obj, None) for obj in stored if tuple(getattr(obj, f) for f in spec.key) in wanted]
        entries += changed[kind]
    history.record_many(entries, user, note)


def load_default_prices(*, replace: bool = False, progress: Callable[[int, int], None] | None = None) -> LoadResult:
    """Load the price book shipped with Airboard (`billing/data/default_prices.csv`)."""
    return load_price_csv(DEFAULT_PRICE_FILE, replace=replace, progress=progress)


# --- Export -----------------------------------------------------------------------------


def _format_effective_from(value: datetime) -> str:
    value = value.astimezone(UTC)
    if value.time() == time():
        return value.date().isoformat()
    return value.isoformat()


def _format_price(value: Decimal) -> str:
    # "6.880000" -> "6.88"; format(..., "f") keeps "100" from becoming "1E+2".
    return format(value.normalize(), "f")


def export_price_csv(file: TextSink) -> int:
    """Write the whole price book to `file` in the load format; returns the rows written.

    Through the one CSV writer (dashboard/kit/csv_export.py): a `source` note such as
    "=HYPERLINK(...)" is written formula-escaped, and `load_price_csv` reads it back as typed.
    """

    def row(kind: PriceTable, values: dict[str, str]) -> list[str]:
        return [kind if name == "kind" else values.get(name, "") for name in COLUMNS]

    def rows() -> Iterator[list[str]]:
        for p in AcceleratorPrice.objects.order_by("accelerator_type", "region", "kind", "effective_from"):
            yield row(PriceTable.ACCELERATOR, {
                "accelerator_type": p.accelerator_type, "region": p.region, "price_kind": p.kind,
                "effective_from": _format_effective_from(p.effective_from),
                "usd_per_hour": _format_price(p.usd_per_hour), "source": p.source,
            })  # fmt: skip
        for e in EgressPrice.objects.order_by("source_region", "destination_region", "effective_from"):
            processing = _format_price(e.usd_per_gb_processing) if e.usd_per_gb_processing else ""
            yield row(PriceTable.EGRESS, {
                "source_region": e.source_region, "destination_region": e.destination_region,
                "effective_from": _format_effective_from(e.effective_from), "usd_per_gb": _format_price(e.usd_per_gb),
                "usd_per_gb_processing": processing, "source": e.source,
            })  # fmt: skip
        for i in InstancePrice.objects.order_by("instance_type", "region", "effective_from"):
            yield row(PriceTable.INSTANCE, {
                "instance_type": i.instance_type, "region": i.region,
                "effective_from": _format_effective_from(i.effective_from),
                "usd_per_hour": _format_price(i.usd_per_hour), "source": i.source,
            })  # fmt: skip

    return write_csv(file, COLUMNS, rows(), lineterminator="\n")
