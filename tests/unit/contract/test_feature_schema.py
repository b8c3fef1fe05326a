import numpy as np
import pytest
from pydantic import ValidationError

from app.contract.feature_schema import FeatureSpec
from tests.support import small_schema

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_decode_full_item():
    schema = small_schema()
    item = {"level": {"N": "12"}, "spend_28d": {"N": "4.5"}, "platform": {"S": "ios"}}
    np.testing.assert_array_equal(schema.decode_item(item), [12.0, 4.5, 1.0])


def test_missing_values_take_schema_defaults():
    schema = small_schema()
    row = schema.decode_item({"spend_28d": {"N": "2"}})
    # level default 1.0, platform default "android" -> index 0
    np.testing.assert_array_equal(row, [1.0, 2.0, 0.0])


@pytest.mark.parametrize(
    "attribute",
    [{"N": "not-a-number"}, {"S": "twelve"}, {"NULL": True}, {"N": "NaN"}, {"N": "inf"}, {}],
)
def test_unusable_numeric_values_take_the_default(attribute):
    row = small_schema().decode_item({"level": attribute})
    assert row[0] == 1.0


def test_unknown_category_takes_the_default():
    row = small_schema().decode_item({"platform": {"S": "windows-phone"}})
    assert row[2] == 0.0


def test_overrides_win_over_stored_values():
    schema = small_schema()
    row = schema.decode_item({"platform": {"S": "android"}}, overrides={"platform": "ios"})
    assert row[2] == 1.0


def test_item_attributes_round_trip_exactly():
    schema = small_schema()
    record = {"level": 37, "spend_28d": 0.1 + 0.2, "platform": "ios"}
    attributes = schema.to_item_attributes(record)
    np.testing.assert_array_equal(schema.decode_item(attributes), schema.encode_record(record))


def test_absent_record_values_are_not_written():
    assert "level" not in small_schema().to_item_attributes({"spend_28d": 1.0})


def test_schema_refuses_category_default_outside_categories():
    with pytest.raises(ValidationError, match="category default"):
        FeatureSpec(name="platform", kind="category", default="web", categories=("ios",))


def test_column_order_is_player_then_offer():
    assert small_schema().column_names == ["level", "spend_28d", "platform", "price", "discount"]
