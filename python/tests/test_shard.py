"""[shard] The GPU run's parts (FLASH_ATTN_STEPS_TEST_SHARD=i/n, conftest.py) run each collected test
exactly once between them, and a malformed part is refused."""

import pytest

from conftest import parse_shard, shard_keeps


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_the_parts_run_each_test_once(n):
    count = 37  # any number of collected tests, not a multiple of every n
    for index in range(count):
        assert sum(shard_keeps(index, i, n) for i in range(1, n + 1)) == 1
    sizes = [sum(shard_keeps(k, i, n) for k in range(count)) for i in range(1, n + 1)]
    assert max(sizes) - min(sizes) <= 1  # the parts are as even as the count allows


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "2/4/1", ""])
def test_a_malformed_part_is_refused(text):
    with pytest.raises(ValueError, match="FLASH_ATTN_STEPS_TEST_SHARD"):
        parse_shard(text)


def test_a_part_parses():
    assert parse_shard("2/4") == (2, 4)
