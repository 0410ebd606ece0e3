"""attention.training: the data of the book's training experiments."""

import pytest
import torch

from attention.training import recall_data


def test_recall_data_targets_are_each_keys_latest_value():
    inputs, targets = recall_data(64, 10, 12, 8, torch.Generator().manual_seed(0), distinct_keys=4)
    for row, target in zip(inputs.tolist(), targets.tolist()):
        written = dict(zip(row[0:20:2], row[1:20:2]))  # later writes replace earlier ones
        assert [target[i] for i in range(20, 24)] == [written[k] for k in row[20:]]
        assert len(set(row[20:])) == 4 and all(t == -100 for t in target[:20])


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_recall_data_refuses_more_distinct_keys_than_pairs(self):
        with pytest.raises(ValueError, match=r"at most min\(num_pairs, num_keys\) distinct keys, got 5"):
            recall_data(2, 4, 12, 8, distinct_keys=5)
