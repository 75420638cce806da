"""The fault suite's count of messages stored twice, per kind of client
(:func:`tests.fault.numbered.copies_by_kind`): a miscounted kind would hide a second copy of
pnsq's client's message among the stock clients' (at-least-once, only counted)."""

from __future__ import annotations

from collections import Counter

from tests.fault.numbered import copies_by_kind


def test_pnsq_copies_are_told_from_stock_copies_by_their_publishers_prefix() -> None:
    copies = Counter(
        {
            b"k0p0-1": 2,  # pnsq's client, partition 0: one extra copy
            b"k0p1-7": 3,  # pnsq's client, partition 1: two
            b"k0p1-8": 1,
            b"gok0-4": 2,  # go-nsq: one
            b"yzk0-9": 2,  # the youzan-style producer: one
        }
    )
    assert copies_by_kind(copies, ["k0p0-", "k0p1-"]) == (3, 2)


def test_a_prefix_ends_at_its_dash_so_partition_1_is_not_partition_11() -> None:
    copies = Counter({b"d1ops11-3": 2, b"god1r0-5": 2})
    assert copies_by_kind(copies, ["d1ops1-"], ["god1r"]) == (0, 1)


def test_bodies_of_neither_kind_are_left_out_when_the_stock_prefixes_are_given() -> None:
    copies = Counter({b"d0ops1-3": 2, b"god0r2-1": 2, b"d1ops1-3": 5})  # d1: another round
    assert copies_by_kind(copies, ["d0ops1-"], ["god0r"]) == (1, 1)
