"""host:port addresses: which spellings are one address without asking DNS."""

from __future__ import annotations

import pytest

from nsqtools.addresses import address_key, join_host_port


@pytest.mark.parametrize(
    ("spellings"),
    [
        ["127.0.0.1:4150", "127.0.0.1:4150"],
        ["NSQD.example:4150", "nsqd.example:4150"],
        ["[::1]:4150", "[0:0:0:0:0:0:0:1]:4150", "[0::1]:4150"],
    ],
)
def test_spellings_of_one_address_share_a_key(spellings: list[str]) -> None:
    assert len({address_key(spelling) for spelling in spellings}) == 1


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("127.0.0.1:4150", "127.0.0.1:4151"),
        ("localhost:4150", "127.0.0.1:4150"),  # the same only after a name lookup
        ("[::1]:4150", "127.0.0.1:4150"),
    ],
)
def test_different_addresses_keep_different_keys(one: str, other: str) -> None:
    assert address_key(one) != address_key(other)


def test_join_brackets_ipv6() -> None:
    assert join_host_port("::1", 4150) == "[::1]:4150"
    assert join_host_port("nsqd", 4150) == "nsqd:4150"
