"""Which payload keys TYPED_KEYS=auto types, from a sample's shares (pure)."""

from __future__ import annotations

from pipeline.lake.payload_fields import MOST_KEYS, KeyShare, column_of, created_columns, hot_keys


def test_auto_types_scalar_keys_in_half_the_rows_that_can_be_columns():
    shares = [KeyShare("user_id", 0.9, "string"), KeyShare("USER_ID", 0.8, "string"),  # one column per name
              KeyShare("amount", 0.5, "number"), KeyShare("flag", 0.7, "boolean"),
              KeyShare("cart", 0.95, "object"), KeyShare("tags", 0.95, "array"),  # not scalars
              KeyShare("rare", 0.49, "string"), KeyShare("a.b", 0.9, "string"),  # too rare; not a name
              KeyShare("1st", 0.9, "string"), KeyShare("x" * 57, 0.9, "string")]
    assert [k.key for k in hot_keys(shares)] == ["user_id", "amount", "flag"]


def test_at_most_the_most_frequent_keys_are_typed():
    shares = [KeyShare(f"k{i}", 1.0 - i / 100, "string") for i in range(MOST_KEYS + 3)]
    assert [k.key for k in hot_keys(shares)] == [f"k{i}" for i in range(MOST_KEYS)]


def test_a_table_made_with_its_keys_gets_one_quoted_column_each():
    assert column_of("user_id") == "details_user_id"
    assert created_columns([KeyShare("user_id", 1, "string"), KeyShare("Mixed", 1, "number")]) == \
        ',\n    "details_user_id" VARCHAR,\n    "details_Mixed" VARCHAR'
    assert created_columns([]) == ""
