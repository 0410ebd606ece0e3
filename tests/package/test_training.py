"""attention.training: the data of the book's training experiments."""

import copy

import pytest
import torch

from attention import TinyTransformer
from attention.training import lookback_data, recall_data, train_lm


def test_recall_data_targets_are_each_keys_latest_value():
    inputs, targets = recall_data(64, 10, 12, 8, torch.Generator().manual_seed(0), distinct_keys=4)
    for row, target in zip(inputs.tolist(), targets.tolist()):
        written = dict(zip(row[0:20:2], row[1:20:2]))  # later writes replace earlier ones
        assert [target[i] for i in range(20, 24)] == [written[k] for k in row[20:]]
        assert len(set(row[20:])) == 4 and all(t == -100 for t in target[:20])


def test_train_lm_with_dropout_repeats_its_losses_and_leaves_torchs_generator_alone():
    # dropout drew from torch's global generator: two runs with one seed differed, and the
    # caller's random numbers after training depended on it
    torch.manual_seed(0)
    base = TinyTransformer(8, 16, 2, 1, context_length=8, dropout=0.1)
    state = torch.random.get_rng_state()
    runs = [train_lm(copy.deepcopy(base), lambda g: lookback_data(4, 8, 8, g), steps=3, seed=1)
            for _ in range(2)]
    assert runs[0] == runs[1]
    assert torch.equal(torch.random.get_rng_state(), state)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_recall_data_refuses_more_distinct_keys_than_pairs(self):
        with pytest.raises(ValueError, match=r"at most min\(num_pairs, num_keys\) distinct keys, got 5"):
            recall_data(2, 4, 12, 8, distinct_keys=5)
