"""The project's one list of Kafka error codes (protocol/errors.py ErrorCode), checked
against kio's (an independent table generated from Kafka's ``Errors.java``)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from coordinator.errors import Code
from protocol.errors import ErrorCode


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_each_code_is_kafkas_by_number_and_name(code: ErrorCode) -> None:
    assert KioErrorCode(int(code)).name.upper() == code.name


def test_the_coordinator_names_the_same_enum() -> None:
    assert Code is ErrorCode
