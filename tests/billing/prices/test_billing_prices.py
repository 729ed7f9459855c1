"""Price book pages: members read, billing admins edit and upload, every change in the history."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from billing.models import AcceleratorPrice, InstancePrice, PriceChange
from billing.prices.pricebook import COLUMNS
from tests.conftest import World

HEADER = ",".join(COLUMNS)


def _billing_admin(world: World) -> None:
    world.bob.user_permissions.add(Permission.objects.get(codename="change_acceleratorprice"))


def test_member_reads_but_cannot_edit(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from="2026-01-01T00:00Z", usd_per_hour="6.88"
    )
    client = world.client_for(world.alice)
    page = client.get("/costs/prices/")
    assert page.status_code == 200 and "6.88" in page.content.decode() and "Read only" in page.content.decode()
    assert client.get("/costs/prices/accelerator/new/").status_code == 403
    assert client.post("/costs/prices/upload/").status_code == 403
    assert client.get("/costs/prices/export.csv")["Content-Type"].startswith("text/csv")


def test_billing_admin_creates_and_edits_with_history(world: World) -> None:
    _billing_admin(world)
    client = world.client_for(world.bob)
    form = {
        "instance_type": "p5.48xlarge",
        "region": "",
        "effective_from": "2026-01-01 00:00",
        "usd_per_hour": "55.04",
        "source": "test",
    }
    assert client.post("/costs/prices/instance/new/", form).status_code == 302
    price = InstancePrice.objects.get()
    created = PriceChange.objects.filter(object_id=price.pk, model="InstancePrice")
    assert {c.field for c in created} >= {"instance_type", "usd_per_hour"} and {c.user for c in created} == {world.bob}

    response = client.post(f"/costs/prices/instance/{price.pk}/", {**form, "usd_per_hour": "50"})
    assert response.status_code == 302
    edit = PriceChange.objects.get(object_id=price.pk, field="usd_per_hour", old="55.040000")
    assert (edit.new, edit.user) == ("50", world.bob)
    page = world.client_for(world.alice).get("/costs/prices/history/")
    assert "usd_per_hour" in page.content.decode()
    # One row per save: the edit (one field) and the creation (every field, in one row).
    edits = page.context["edits"]
    assert [(e.created, len(e.fields)) for e in edits] == [(False, 1), (True, created.count())]
    assert edits[0].fields == (("usd_per_hour", "55.040000", "50"),)


def test_form_validation_messages(world: World) -> None:
    client = world.client_for(world.sam)
    response = client.post(
        "/costs/prices/egress/new/",
        {"source_region": "us-west2", "destination_region": "internet", "effective_from": "x", "usd_per_gb": "0.09",
         "usd_per_gb_processing": "0"},
    )  # fmt: skip
    body = response.content.decode()
    assert response.status_code == 200
    assert "region name like" in body and "Enter a valid date/time" in body


def test_upload_reports_bad_lines_and_writes_nothing(world: World) -> None:
    client = world.client_for(world.sam)
    text = "\n".join([
        HEADER,
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4.00,,ok,,,",
        "instance,,,,,2026-01-01,abc,,bad price,p5.48xlarge,,",
        "instance,,,,,2026-01-01,3,,bad type,p5 48xlarge,,",
    ]) + "\n"  # fmt: skip
    upload = SimpleUploadedFile("prices.csv", text.encode(), content_type="text/csv")
    response = client.post("/costs/prices/upload/", {"file": upload})
    body = response.content.decode()
    assert "line 3: usd_per_hour" in body and "line 4: instance_type" in body
    assert AcceleratorPrice.objects.count() == 0 and PriceChange.objects.count() == 0


def test_upload_preview_then_load_records_user(world: World) -> None:
    client = world.client_for(world.sam)
    text = f"{HEADER}\ninstance,,us-east-2,,,2026-01-01,14.75,,capacity block,p4d.24xlarge,,\n"
    preview = client.post(
        "/costs/prices/upload/", {"file": SimpleUploadedFile("p.csv", text.encode()), "dry_run": "on"}
    )
    assert "1 to add" in preview.content.decode() and InstancePrice.objects.count() == 0
    client.post("/costs/prices/upload/", {"file": SimpleUploadedFile("p.csv", text.encode())})
    assert InstancePrice.objects.get().usd_per_hour == Decimal("14.75")
    assert set(PriceChange.objects.values_list("user__username", flat=True)) == {"sam"}


def test_command_line_import_records_history_without_user(db: None) -> None:
    call_command("load_prices", "--default")
    assert PriceChange.objects.exists()
    assert not PriceChange.objects.filter(user__isnull=False).exists()
    assert InstancePrice.objects.filter(instance_type="p5.48xlarge").count() == 2
