"""youzan's dispatch tags and ext filters: the pure decisions of nsqd.core.tags."""

from __future__ import annotations

import pytest

from nsqd.core.tags import ExtFilterError, Verdict, decide, header_of, parse_ext_filter

TAGGED = {"##client_dispatch_tag": "X"}


@pytest.mark.parametrize(
    ("header", "consumer", "present", "verdict"),
    [
        (TAGGED, "X", {"X"}, Verdict.DELIVER),
        (TAGGED, "", {"X"}, Verdict.OTHERS),  # the tag's consumer is there
        (TAGGED, "", set(), Verdict.DELIVER),  # nobody has the tag: the normal pool
        (TAGGED, "Y", {"Y"}, Verdict.OTHERS),  # a tagged consumer gets its tag only
        ({}, "X", {"X"}, Verdict.OTHERS),
        ({}, "", {"X"}, Verdict.DELIVER),
    ],
)
def test_dispatch(
    header: dict[str, str], consumer: str, present: set[str], verdict: Verdict
) -> None:
    assert decide(header, consumer_tag=consumer, present_tags=present) is verdict


@pytest.mark.parametrize(
    ("raw", "header", "matches"),
    [
        ({"type": 1, "filter_ext_key": "a", "filter_data": "1"}, {"a": "1"}, True),
        ({"type": 1, "filter_ext_key": "a", "filter_data": "1"}, {"a": 1}, True),
        (
            {"type": 1, "filter_ext_key": "a", "filter_data": "1", "inverse": True},
            {"a": "1"},
            False,
        ),
        ({"type": 2, "filter_ext_key": "a", "filter_data": "^b.+"}, {"a": "bcd"}, True),
        ({"type": 3, "filter_ext_key": "a", "filter_data": "x*"}, {"a": "y"}, False),
        (
            {
                "type": 4,
                "filter_ext_key": "all",
                "filter_data_list": [
                    {"filter_ext_key": "a", "filter_data": "1"},
                    {"filter_ext_key": "b", "filter_data": "2"},
                ],
            },
            {"a": "1", "b": "3"},
            False,
        ),
        (
            {
                "type": 4,
                "filter_ext_key": "any",
                "filter_data_list": [{"filter_ext_key": "b", "filter_data": "3"}],
            },
            {"a": "1", "b": "3"},
            True,
        ),
    ],
)
def test_ext_filters(raw: dict[str, object], header: dict[str, object], matches: bool) -> None:
    flt = parse_ext_filter(raw)
    assert flt is not None
    assert flt.matches(header) is matches
    verdict = decide(header, consumer_tag="", present_tags=(), ext_filter=flt)
    assert verdict is (Verdict.DELIVER if matches else Verdict.DROP)


@pytest.mark.parametrize(
    "raw",
    [
        {"type": 1, "filter_ext_key": "", "filter_data": "1"},
        {"type": 2, "filter_ext_key": "a", "filter_data": "("},
        {"type": 4, "filter_ext_key": "any"},
        {"type": 9, "filter_ext_key": "a", "filter_data": "1"},
    ],
)
def test_bad_filters(raw: dict[str, object]) -> None:
    with pytest.raises(ExtFilterError):
        parse_ext_filter(raw)


def test_zan_test_and_headers() -> None:
    assert parse_ext_filter({}) is None
    assert header_of(b"") == {}
    assert header_of(b"[1]") == {}
    assert header_of(b"{") == {}
    zan = header_of(b'{"zan_test": "true"}')
    assert decide(zan, consumer_tag="", present_tags=(), skip_zan_test=True) is Verdict.DROP
    assert decide(zan, consumer_tag="", present_tags=()) is Verdict.DELIVER
