"""What an error or a log line may say of a connection string: never its secret."""

from __future__ import annotations

import pytest

from pipeline.errors import MASK, scrub_secrets


@pytest.mark.parametrize(("text", "secret"), [
    ("postgresql://app:s3cr3t@db:5432/events", "s3cr3t"),
    ("host=db password=s3cr3t dbname=events", "s3cr3t"),
    # a Spark Connect address carries its bearer token as a parameter (SPARK_REMOTE)
    ("Lost the Spark Connect server at SPARK_REMOTE=sc://spark:15002/;token=s3cr3t;use_ssl=true", "s3cr3t"),
    ("sc://spark:15002/;user_id=etl;TOKEN=s3cr3t", "s3cr3t"),
    ("the Spark executors (sc://spark:15002/;token=s3cr3t) do not share", "s3cr3t"),  # the ')' stays
])
def test_a_secret_in_a_message_is_masked_and_the_rest_kept(text, secret):
    scrubbed = scrub_secrets(text)
    assert secret not in scrubbed and MASK in scrubbed
    assert scrubbed.replace(MASK, secret) == text  # only the secret went
