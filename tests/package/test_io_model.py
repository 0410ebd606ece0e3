"""The two-level IO model: exact counts on small cases worked out by hand, growth rates of
Theorem 2 of Dao et al. (2022), the fast-memory limit, and where tiling stops paying."""

import numpy as np
import pytest

from attention.io_model import (
    IOCount,
    TwoLevelMemory,
    standard_attention_io,
    standard_blocks,
    standard_io_formula,
    tiled_attention_io,
    tiled_blocks,
    tiled_io_formula,
)


def test_tiled_counts_one_query_block_by_hand():
    # t = 4, d_h = 2, m_sram = 40: B_k = min(4, 2, 40 // 8) = 2, B_q = min(4, (40 - 8) // 8) = 4.
    assert tiled_blocks(4, 2, 40) == (4, 2)
    # Reads: Q once (4 * 2 = 8), K and V once each for the single query block (8 + 8).
    # Writes: O (8) and L (4).
    # Held at once: Q 8, O 8, m 4, l 4, K_j 2 * 2, V_j 2 * 2, S_ij 4 * 2 = 40 = m_sram.
    assert tiled_attention_io(4, 2, 40) == IOCount(reads=24, writes=12, peak=40)


def test_tiled_rereads_keys_and_values_once_per_query_block():
    # t = 4, d_h = 2, B = 2: two query blocks, each reading all of K and V (16 elements).
    # Reads: Q 8 + 2 * 16 = 40. Writes: O 8 + L 4 = 12.
    # Held at once: Q_i 4, O_i 4, m_i 2, l_i 2, K_j 4, V_j 4, S_ij 4 = 24.
    assert tiled_attention_io(4, 2, 100, block_size=2) == IOCount(reads=40, writes=12, peak=24)
    assert tiled_attention_io(4, 2, 100, block_size=(2, 4)).total == 52  # same traffic, wider S


def test_standard_counts_by_hand():
    # t = 4, d_h = 2, m_sram = 100: one query block of 4 rows, key tiles of 2 rows.
    # S = QK^T: reads Q 8 + K 8, writes S 16. Softmax: reads S 16, writes A 16.
    # Z = AV: reads A 16 + V 8, writes Z 8.
    # Held at once: Q 8 + K_j 4 + S_ij 8 = 20 (and Z_i 8 + A_ij 8 + V_j 4 = 20).
    assert standard_attention_io(4, 2, 100) == IOCount(reads=56, writes=40, peak=20)
    assert standard_io_formula(4, 2) == 4 * 4 * 2 + 4 * 4 * 4  # 4 t d_h + 4 t^2 = 96


def test_standard_rereads_keys_and_values_when_fast_memory_is_small():
    # m_sram = 12: B_k = min(4, 2, 12 // 4) = 2, B_q = (12 - 4) // 4 = 2, two query blocks.
    # Reads: Q 8 + K 2 * 8 + S 16 + A 16 + V 2 * 8 = 72. Writes: S 16 + A 16 + Z 8 = 40.
    assert standard_attention_io(4, 2, 12) == IOCount(reads=72, writes=40, peak=12)


SIZES = [
    (t, d_h, m_sram)
    for t in (1, 7, 64, 300)
    for d_h in (1, 8, 64)
    for m_sram in (300, 2_000, 20_000, 300_000)
    if m_sram >= max(t, 4 * d_h + 3)  # smaller fast memories raise: see TestBadInput
]


@pytest.mark.parametrize("t, d_h, m_sram", SIZES)
def test_simulation_equals_closed_form(t, d_h, m_sram):
    assert standard_attention_io(t, d_h, m_sram).total == standard_io_formula(t, d_h, m_sram)
    assert tiled_attention_io(t, d_h, m_sram).total == tiled_io_formula(t, d_h, m_sram)


def test_standard_grows_like_t_squared():
    m_sram = 2**20
    small, large = standard_attention_io(1024, 64, m_sram), standard_attention_io(2048, 64, m_sram)
    assert 3.7 < large.total / small.total <= 4.0
    assert small.total >= 4 * 1024**2  # S and A, each written once and read once
    wide = standard_attention_io(2048, 128, m_sram)
    assert wide.total / large.total < 1.15  # the head width enters only the t d_h terms


def test_tiled_grows_like_t_squared_d_squared_over_m():
    def total(t, d_h, m_sram):
        return tiled_attention_io(t, d_h, m_sram).total

    assert 3.4 < total(4096, 16, 16384) / total(2048, 16, 16384) < 4.1  # t doubled
    assert 3.4 < total(4096, 32, 16384) / total(4096, 16, 16384) < 4.6  # d_h doubled
    assert 1.8 < total(4096, 16, 8192) / total(4096, 16, 16384) < 2.2  # m_sram halved
    assert total(4096, 16, 16384) == pytest.approx(6 * 4096**2 * 16**2 / 16384, rel=0.2)


def test_tiled_working_set_never_exceeds_fast_memory():
    for m_sram in (259, 1000, 4096, 50_000):
        assert tiled_attention_io(256, 64, m_sram).peak <= m_sram


def test_tiling_stops_paying_once_everything_fits():
    t, d_h = 512, 64
    fits = t * (3 * d_h + 2) + 2 * d_h**2  # one query block of t rows
    assert tiled_blocks(t, d_h, fits) == (t, d_h)
    assert tiled_blocks(t, d_h, fits - 1)[0] < t
    floor = 4 * t * d_h + t  # Q, K, V read once, Z and L written once
    assert tiled_attention_io(t, d_h, fits).total == floor
    assert tiled_blocks(t, d_h, 4 * fits) == (t, d_h)  # a block never has more than t rows
    assert tiled_attention_io(t, d_h, 4 * fits).total == floor  # more fast memory: no gain
    assert tiled_attention_io(t, d_h, fits // 2).total > floor
    assert standard_attention_io(t, d_h, fits).total == 4 * t * d_h + 4 * t * t


def test_tiling_stops_paying_when_fast_memory_is_below_d_h_squared():
    t, d_h = 256, 64
    small, large = d_h**2 // 2, 2 * d_h**2
    assert tiled_attention_io(t, d_h, small).total > standard_attention_io(t, d_h, small).total
    assert tiled_attention_io(t, d_h, large).total < standard_attention_io(t, d_h, large).total


def test_a_key_tile_never_has_more_rows_than_there_are_tokens():
    # t = 4 < d_h = 8. Standard, m_sram = 80: B_k = min(4, 8, 80 // 16) = 4, then
    # B_q = min(4, (80 - 32) // 12) = 4; held: Q 32 + K_j 32 + S_ij 16 = 80. (B_k = 8 rows,
    # for keys that are not there, would leave room for B_q = 1 query row only.)
    assert standard_blocks(4, 8, 80) == (4, 4)
    assert standard_attention_io(4, 8, 80).peak == 80
    # Tiled, m_sram = 160: B_k = min(4, 8, 160 // 32) = 4, B_q = min(4, (160 - 64) // 22) = 4;
    # held: Q_i 32, O_i 32, m_i 4, l_i 4, K_j 32, V_j 32, S_ij 16 = 152.
    assert tiled_blocks(4, 8, 160) == (4, 4)
    assert tiled_attention_io(4, 8, 160) == IOCount(reads=96, writes=36, peak=152)

def test_a_block_size_pair_may_be_a_list():
    # [B_q, B_k] was refused as "block_size must be a positive int", though (B_q, B_k) is taken
    assert tiled_attention_io(64, 8, 256, block_size=[4, 8]) == tiled_attention_io(64, 8, 256, (4, 8))


def test_numpy_integers_are_taken_as_python_ints():
    # np.int64 was refused everywhere ("t must be a positive int, got np.int64(64)"), and a
    # block_size of one raised a TypeError; the counts come back as Python ints
    i = np.int64
    assert standard_blocks(i(64), i(8), i(256)) == standard_blocks(64, 8, 256)
    assert tiled_blocks(i(64), i(8), i(256)) == tiled_blocks(64, 8, 256)
    assert standard_attention_io(i(64), i(8), i(256)) == standard_attention_io(64, 8, 256)
    assert tiled_attention_io(i(64), i(8), i(256)) == tiled_attention_io(64, 8, 256)
    assert tiled_attention_io(64, 8, 256, block_size=i(2)) == tiled_attention_io(64, 8, 256, block_size=2)
    assert (tiled_attention_io(64, 8, 256, block_size=(i(2), i(4)))
            == tiled_attention_io(64, 8, 256, block_size=(2, 4)))
    assert tiled_io_formula(i(64), i(8), i(256)) == tiled_io_formula(64, 8, 256)
    # 4 t^2 + 4 t d_h passes int64's range here: computed in int64 it would wrap
    assert standard_io_formula(i(2**31), i(2**20)) == standard_io_formula(2**31, 2**20) > 2**63
    mem, ref = TwoLevelMemory(i(16)), TwoLevelMemory(16)
    mem.load("Q_i", i(2), i(3))
    ref.load("Q_i", 2, 3)
    assert mem.count() == ref.count() and type(mem.count().reads) is int


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        "call, message",
        [
            (lambda: tiled_attention_io(0, 8, 1000), "t must be a positive int, got 0"),
            (lambda: tiled_attention_io(8, -1, 1000), "d_h must be a positive int, got -1"),
            (lambda: tiled_attention_io(8, 8, 1000.0), "m_sram must be a positive int, got 1000.0"),
            (lambda: standard_attention_io(8, True, 1000), "d_h must be a positive int, got True"),
            (lambda: tiled_attention_io(8, 8, 100, block_size=0), r"block_size must be a positive int.*got 0"),
            (lambda: tiled_attention_io(8, 8, 100, block_size=(0, 4)), r"block_size must be a positive.*got 0"),
            (lambda: tiled_attention_io(8, 8, 100, block_size=(4, 0)), r"block_size must be a positive.*got 0"),
            (lambda: tiled_attention_io(0, 8, 1000, block_size=4), "t must be a positive int, got 0"),
            (lambda: tiled_attention_io(8, 8, 0, block_size=4), "m_sram must be a positive int, got 0"),
            (lambda: tiled_attention_io(8, 8, 34), r"tiled attention needs m_sram >= 35 elements.*got 34"),
            (lambda: standard_attention_io(100, 8, 99), r"standard attention needs m_sram >= 100.*got 99"),
            (lambda: standard_attention_io(4, 8, 16), "needs m_sram >= 17 elements, got 16"),
            (lambda: tiled_io_formula(8, 8, 34), "tiled attention needs m_sram >= 35 elements, got 34"),
            (lambda: standard_io_formula(0, 8), "t must be a positive int, got 0"),
            # a block of -3 rows counted -12 reads; 2.5 rows counted 5.0
            (lambda: TwoLevelMemory(16).load("A", -3, 4), "rows must be a positive int, got -3"),
            (lambda: TwoLevelMemory(16).allocate("A", 2, 2.5), "cols must be a positive int, got 2.5"),
            (lambda: TwoLevelMemory(16).free("B"), r"block 'B' must be held to be freed; held: \[\]"),
            # an unhashable name raised a TypeError; a float or a triple as block_size too
            (lambda: TwoLevelMemory(16).load(["A"], 2, 2), r"block name must be a str, got \['A'\] of type list"),
            (lambda: TwoLevelMemory(16).store(["A"]), r"block name must be a str, got \['A'\]"),
            (lambda: TwoLevelMemory(16).free(["A"]), r"block name must be a str, got \['A'\]"),
            (lambda: tiled_attention_io(8, 8, 100, block_size=2.5), r"block_size must be a positive int, got 2\.5"),
            (lambda: tiled_attention_io(8, 8, 100, block_size=(1, 2, 3)), r"or a pair \(B_q, B_k\).*got \(1, 2, 3\)"),
        ],
    )
    def test_sizes_must_be_positive_and_fast_memory_large_enough(self, call, message):
        with pytest.raises(ValueError, match=message):
            call()

    def test_memory_refuses_to_store_what_it_does_not_hold(self):
        mem = TwoLevelMemory(10)
        mem.load("Q_i", 2, 3)
        with pytest.raises(ValueError, match="already held"):
            mem.allocate("Q_i", 1, 1)
        with pytest.raises(ValueError, match="must be held to be stored"):
            mem.store("K_j")
        mem.store("Q_i")
        mem.free("Q_i")
        mem.load("K_j", 2, 5)  # 10 elements: fits once Q_i is freed
        assert mem.count() == IOCount(reads=16, writes=6, peak=10)

    def test_a_block_size_whose_working_set_does_not_fit_is_refused(self):
        # B = 16, d_h = 16: Q_i, O_i, K_j 256 each and m_i, l_i 16 each make 800 elements;
        # loading V_j (256 more) is the first request that does not fit.
        with pytest.raises(ValueError, match=r"m_sram=1000 elements, got 1056 elements with 'V_j'"):
            tiled_attention_io(64, 16, 1000, block_size=16)
