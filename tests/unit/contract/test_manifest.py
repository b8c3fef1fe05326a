import pytest
from pydantic import ValidationError

from app.contract.manifest import Manifest, load_manifest, write_manifest
from tests.support import offer, small_manifest

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_manifest_round_trips_through_disk(tmp_path):
    manifest = small_manifest()
    write_manifest(manifest, tmp_path)
    assert load_manifest(tmp_path) == manifest


def test_fallback_must_be_in_catalog():
    data = small_manifest().model_dump()
    data["fallback_offer_id"] = "missing"
    with pytest.raises(ValidationError, match="not in the catalog"):
        Manifest.model_validate(data)


def test_offer_features_must_match_schema_width():
    data = small_manifest().model_dump()
    data["offers"][0]["features"] = [1.0]
    with pytest.raises(ValidationError, match="needs 2 finite features"):
        Manifest.model_validate(data)


def test_duplicate_member_names_are_refused():
    data = small_manifest().model_dump()
    data["members"][1]["name"] = data["members"][0]["name"]
    with pytest.raises(ValidationError, match="member names must be unique"):
        Manifest.model_validate(data)


def test_sha256_must_look_like_one():
    data = small_manifest().model_dump()
    data["members"][0]["sha256"] = "abc"
    with pytest.raises(ValidationError):
        Manifest.model_validate(data)


def test_net_price_applies_discount():
    assert offer("x", 10.0, 0.25, 0.1).net_price == pytest.approx(7.5)
