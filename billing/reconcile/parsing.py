"""Billed usage and list prices read from CSV exports, unsaved: every bad row with its line number.

Billed usage arrives as CSV exports of Databricks `system.billing.usage`, priced by
`system.billing.list_prices` at `pricing.effective_list.default` (the price in force, a
promotion included; `pricing.default` only where a row has no effective list price). Shapes:
../shared/reference/databricks-ai-runtime.md ("Serverless GPU in the billing system table").
`record_type` ORIGINAL, RETRACTION (negative quantities) and RESTATEMENT rows are all kept.
A row without a `record_id` gets one from its content, so re-importing it adds nothing.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import IO

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from billing.choices import RecordType
from billing.models import BilledUsage, BillingListPrice
from billing.prices.pricebook import RowError

USAGE_REQUIRED = ("usage_start_time", "usage_end_time", "sku_name", "usage_quantity")
PRICE_REQUIRED = ("sku_name", "price_start_time")
# Bounds of what a row may say, so that quantity x price always fits the exact columns
# (numeric(38, 15): 23 digits before the point): a usage quantity of 10^18 (an exabyte in
# bytes, a billion years in hours) and a list price of $10,000 a unit are far beyond real rows.
MAX_USAGE_QUANTITY = Decimal(10) ** 18
MAX_UNIT_PRICE = Decimal(10) ** 4
DECIMAL_PLACES = 15


def _when(text: str, name: str) -> datetime:
    text = text.strip()
    value = parse_datetime(text.replace(" UTC", "").replace("Z", "+00:00")) if text else None
    if value is None:
        day = parse_date(text) if text else None
        if day is None:
            raise ValueError(f"{name} {text!r} is not a date-time")
        value = datetime(day.year, day.month, day.day)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _decimal(text: str, name: str, limit: Decimal) -> Decimal:
    """A finite number of at most `limit` in size and DECIMAL_PLACES places, else a row error.

    Beyond them the exact column (numeric(38, 15)) refused the value while storing, and the
    import died with a traceback instead of naming the row (issue 33: a usage row of 1e30).
    """
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{name} {text!r} is not a number") from None
    if not value.is_finite():
        raise ValueError(f"{name} {text!r} is not a finite number")
    if abs(value) > limit:
        raise ValueError(f"{name} {text[:40]!r} is out of range (at most {limit:,} in size)")
    _sign, digits, exponent = value.as_tuple()
    trailing_zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    if value and int(exponent) + trailing_zeros < -DECIMAL_PLACES:
        raise ValueError(f"{name} {text[:40]!r} has more than {DECIMAL_PLACES} decimal places")
    return value


def _json_object(row: dict[str, str], name: str) -> dict:
    """A JSON column, or its flattened `name.key` columns as `system.billing` exports write them."""
    text = (row.get(name) or "").strip()
    if text:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"{name} is not valid JSON") from None
        if not isinstance(value, dict):
            raise ValueError(f"{name} is not a JSON object")
        return value
    prefix = f"{name}."
    return {k[len(prefix) :]: v for k, v in row.items() if k and k.startswith(prefix) and v not in ("", None)}


def _rows(source: IO[str]) -> Iterable[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(source)
    for row in reader:
        yield reader.line_num, {(k or "").strip(): (v or "") for k, v in row.items()}


def _header_errors(source_fields: list[str] | None, required: Iterable[str]) -> list[RowError]:
    missing = [name for name in required if name not in (source_fields or [])]
    return [RowError(1, f"missing column {name}") for name in missing]


def parse_list_prices(source: IO[str]) -> tuple[list[BillingListPrice], list[RowError]]:
    """List price rows from CSV: `pricing` JSON, or flattened `pricing.*` columns.

    The price is `effective_list.default` (what is charged, a promotion included), else
    `default` for rows written before the effective list price existed.
    """
    prices, errors = [], []
    lines = list(_rows(source))
    header = list(lines[0][1]) if lines else []
    if lines:
        errors += _header_errors(header, PRICE_REQUIRED)
        if "pricing" not in header and "pricing.default" not in header:
            errors.append(RowError(1, "missing column pricing (or pricing.default)"))
    if errors:
        return [], errors
    for line, row in lines:
        try:
            sku = row["sku_name"].strip()
            if not sku:
                raise ValueError("sku_name is empty")
            pricing = _json_object(row, "pricing")
            effective = pricing.get("effective_list")
            effective = (effective or {}).get("default") if isinstance(effective, dict) else None
            effective = effective or pricing.get("effective_list.default")
            if effective is None and pricing.get("default") is None:
                raise ValueError("pricing has no effective_list.default nor default price")
            price_text = str(effective if effective is not None else pricing["default"])
            end_text = row.get("price_end_time", "").strip()
            prices.append(
                BillingListPrice(
                    sku_name=sku,
                    price_start_time=_when(row["price_start_time"], "price_start_time"),
                    price_end_time=_when(end_text, "price_end_time") if end_text else None,
                    currency_code=(row.get("currency_code") or "USD").strip(),
                    usage_unit=row.get("usage_unit", "").strip(),
                    price_per_unit=_decimal(price_text, "pricing", MAX_UNIT_PRICE),
                )
            )
        except ValueError as exc:
            errors.append(RowError(line, str(exc)))
    return prices, errors


def _record_id(row: dict[str, str]) -> str:
    given = row.get("record_id", "").strip()
    if given:
        return given
    canonical = json.dumps(sorted(row.items()), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def parse_usage(source: IO[str]) -> tuple[list[BilledUsage], list[RowError]]:
    """Billed usage rows from CSV, unsaved and unlinked; every bad row with its line number."""
    records, errors = [], []
    lines = list(_rows(source))
    if lines:
        errors += _header_errors(list(lines[0][1]), USAGE_REQUIRED)
    if errors:
        return [], errors
    now = timezone.now()
    seen: dict[str, int] = {}
    for line, row in lines:
        try:
            sku = row["sku_name"].strip()
            if not sku:
                raise ValueError("sku_name is empty")
            start = _when(row["usage_start_time"], "usage_start_time")
            end = _when(row["usage_end_time"], "usage_end_time")
            if end < start:
                raise ValueError("usage_end_time is before usage_start_time")
            day_text = row.get("usage_date", "").strip()
            day = parse_date(day_text) if day_text else start.astimezone(UTC).date()
            if day is None:
                raise ValueError(f"usage_date {day_text!r} is not a date")
            metadata = _json_object(row, "usage_metadata")
            record_type = (row.get("record_type") or "").strip() or RecordType.ORIGINAL
            if record_type not in RecordType.values:
                raise ValueError(f"record_type {record_type!r} is not one of {', '.join(RecordType.values)}")
            record_id = _record_id(row)
            if record_id in seen:
                raise ValueError(f"record_id {record_id} repeats line {seen[record_id]}")
            seen[record_id] = line
            records.append(
                BilledUsage(
                    record_id=record_id,
                    sku_name=sku,
                    usage_start_time=start,
                    usage_end_time=end,
                    usage_date=day,
                    usage_quantity=_decimal(row["usage_quantity"], "usage_quantity", MAX_USAGE_QUANTITY),
                    usage_unit=row.get("usage_unit", "").strip(),
                    usage_metadata=metadata,
                    custom_tags=_json_object(row, "custom_tags"),
                    job_run_id=str(metadata.get("job_run_id") or "").strip(),
                    billing_origin_product=(row.get("billing_origin_product") or "").strip(),
                    record_type=record_type,
                    usage_type=(row.get("usage_type") or "").strip(),
                    product_features=_json_object(row, "product_features"),
                    ai_runtime_workload_id=str(metadata.get("ai_runtime_workload_id") or "").strip(),
                    ai_runtime_pool_id=str(metadata.get("ai_runtime_pool_id") or "").strip(),
                    databricks_cluster_id=str(metadata.get("cluster_id") or "").strip()[:200],
                    imported_at=now,
                )
            )
        except ValueError as exc:
            errors.append(RowError(line, str(exc)))
    return records, errors
