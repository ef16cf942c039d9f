"""traffic: bytes and records per hour, topic, principal and client id; requests per API key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import traffic
from tests.spark_jobs.rows import ALICE, BOB, FETCH, METADATA, PRODUCE, at, frame, request

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def audit(spark: SparkSession) -> DataFrame:
    return frame(
        spark,
        request(PRODUCE, "2026-03-01 10:05", [("orders", 0, 100, 2), ("orders", 1, 50, 1), ("clicks", 0, 30, 3)],
                principal=ALICE, client_id="a", request_bytes=300, response_bytes=40, acks=-1),
        # Refused by the broker, but the bytes crossed the wire: counted.
        request(PRODUCE, "2026-03-01 10:40", [("orders", 0, 20, 1)], principal=ALICE, client_id="a",
                error_code=6, request_bytes=150, response_bytes=40, acks=1),
        request(FETCH, "2026-03-01 10:50", [("orders", 0, 120, 3)], principal=BOB, client_id="b",
                request_bytes=80, response_bytes=200),
        request(FETCH, "2026-03-01 11:10", [("orders", 1, 40, 1)], principal=BOB, client_id=None,
                request_bytes=80, response_bytes=90),
        request(METADATA, "2026-03-01 10:10", principal=ALICE, client_id="a", request_bytes=30,
                response_bytes=500),
        # acks=0: no response at all.
        request(PRODUCE, "2026-03-01 11:20", [("clicks", 0, 10, 1)], principal=ALICE, client_id="a",
                acks=0, error_code=None, latency_us=None, request_bytes=60, response_bytes=None),
    )


def test_bytes_and_records_per_hour_topic_principal_client(spark: SparkSession) -> None:
    ten, eleven = at("2026-03-01 10:00"), at("2026-03-01 11:00")
    expected = spark.createDataFrame(
        [
            (ten, "orders", ALICE, "a", 170, 4, 0, 0),
            (ten, "clicks", ALICE, "a", 30, 3, 0, 0),
            (ten, "orders", BOB, "b", 0, 0, 120, 3),
            (eleven, "orders", BOB, None, 0, 0, 40, 1),
            (eleven, "clicks", ALICE, "a", 10, 1, 0, 0),
        ],
        "hour timestamp, topic string, principal string, client_id string, "
        "bytes_in long, records_in long, bytes_out long, records_out long",
    )

    assert_df_equality(traffic.transform(audit(spark)), expected,
                       ignore_row_order=True, ignore_nullable=True)


def test_requests_per_hour_and_api_key(spark: SparkSession) -> None:
    ten, eleven = at("2026-03-01 10:00"), at("2026-03-01 11:00")
    expected = spark.createDataFrame(
        [
            (ten, 0, "Produce", 2, 450, 80, 0),
            (ten, 1, "Fetch", 1, 80, 200, 0),
            (ten, 3, "Metadata", 1, 30, 500, 0),
            (eleven, 1, "Fetch", 1, 80, 90, 0),
            (eleven, 0, "Produce", 1, 60, 0, 1),
        ],
        "hour timestamp, api_key short, api_name string, requests long, request_bytes long, "
        "response_bytes long, no_response long",
    )

    assert_df_equality(traffic.transform_requests(audit(spark)), expected,
                       ignore_row_order=True, ignore_nullable=True)
