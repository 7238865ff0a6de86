"""Duration values of the configuration (pipeline/durations.py): the spelling Spark's
interval parser reads, seconds of every accepted form, and one-line refusals."""

from __future__ import annotations

import pytest

from pipeline.durations import normalize_duration, seconds_of, spark_duration_seconds


@pytest.mark.parametrize(
    ("written", "spark"),
    [
        ("500 ms", "500 milliseconds"),
        ("10 s", "10 seconds"),
        ("1 min", "1 minutes"),
        ("2 minutes", "2 minutes"),
        ("1.5 s", "1500 milliseconds"),
        ("0.25 minutes", "15000 milliseconds"),
    ],
)
def test_durations_are_spelled_as_sparks_interval_parser_reads_them(
    written: str, spark: str
) -> None:
    assert normalize_duration("k", written) == spark


def test_a_bad_duration_names_its_key() -> None:
    with pytest.raises(ValueError, match="maxTriggerDelay must look like"):
        normalize_duration("maxTriggerDelay", "soon")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(300, 300.0), ("300", 300.0), ("500 ms", 0.5), ("5 minutes", 300.0), ("1 hour", 3600.0)],
)
def test_seconds_of_every_accepted_form(value: object, seconds: float) -> None:
    assert seconds_of(value) == seconds


@pytest.mark.parametrize("value", [True, "5 fortnights", "soon"])
def test_seconds_of_refuses_what_it_cannot_read(value: object) -> None:
    with pytest.raises(ValueError, match="must be seconds"):
        seconds_of(value)


def test_spark_duration_seconds_reads_the_normalised_spelling() -> None:
    assert spark_duration_seconds("k", "1.5 s") == 1.5
