"""attention.training: the data of the book's training experiments."""

import copy

import pytest
import torch

from attention import TinyTransformer
from attention.training import (
    head_scores,
    induction_data,
    lookback_data,
    next_token_accuracy,
    recall_data,
    train_lm,
)


def test_recall_data_targets_are_each_keys_latest_value():
    inputs, targets = recall_data(64, 10, 12, 8, torch.Generator().manual_seed(0), distinct_keys=4)
    for row, target in zip(inputs.tolist(), targets.tolist()):
        written = dict(zip(row[0:20:2], row[1:20:2]))  # later writes replace earlier ones
        assert [target[i] for i in range(20, 24)] == [written[k] for k in row[20:]]
        assert len(set(row[20:])) == 4 and all(t == -100 for t in target[:20])


def test_train_lm_takes_int32_targets_as_the_models_take_int32_ids():
    # int64 and int32 ids (-100 among them) give one loss; cross_entropy refused int32
    inputs, targets = lookback_data(2, 6, 4, torch.Generator().manual_seed(0))
    assert (targets == -100).any()
    torch.manual_seed(0)
    base = TinyTransformer(4, 8, 2, 1, context_length=6)
    losses = [train_lm(copy.deepcopy(base), lambda g: (inputs, targets.to(dtype)), 2)
              for dtype in (torch.int64, torch.int32)]
    assert losses[0] == losses[1]


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



def test_uint8_target_ids_are_scored_as_the_same_ids_in_int64():
    # uint8 byte ids: 156 != -100 was False (-100 wraps to 156 in uint8), so next_token_accuracy
    # left out every target 156 and train_lm did not check it against the vocabulary
    torch.manual_seed(0)
    model = TinyTransformer(200, 8, 2, 1, context_length=6)
    inputs = torch.tensor([[0, 1, 2, 3, 4, 5]])
    with torch.no_grad():
        predictions = model(inputs).argmax(dim=-1)  # (1, 6)
    targets = predictions.clone()
    targets[0, 0] = 156 if predictions[0, 0] != 156 else 157  # one miss in six
    accuracy = next_token_accuracy(model, inputs, targets.to(torch.uint8))
    assert accuracy == next_token_accuracy(model, inputs, targets) == pytest.approx(5 / 6)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_a_uint8_target_156_is_checked_against_the_vocabulary(self):
        # in uint8 -100 wraps to 156, so train_lm took a target 156 for "not scored"
        torch.manual_seed(0)
        small = TinyTransformer(100, 8, 2, 1, context_length=6)  # 156 is no id of its vocabulary
        inputs = torch.tensor([[0, 1, 2, 3, 4, 5]])
        targets = torch.tensor([[156, 1, 2, 3, 4, 5]], dtype=torch.uint8)
        with pytest.raises(ValueError, match=r"n_vocab=100\) or -100 \(not scored\), got ids from"):
            train_lm(small, lambda g: (inputs, targets), 1)

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            # each raised an AttributeError ('str' object has no attribute 'parameters', 'eval')
            (lambda m, x, y: train_lm("model", lambda g: (x, y), 1),
             r"model must be a torch.nn.Module, got str"),
            (lambda m, x, y: train_lm(m, "data", 1),  # a TypeError: 'str' object is not callable
             r"data must be a function of a torch.Generator, got str"),
            (lambda m, x, y: next_token_accuracy("model", x, y), r"model must be a torch.nn.Module, got str"),
            (lambda m, x, y: next_token_accuracy(m, x, y.tolist()),
             r"targets must be a tensor of token ids, got list"),
            (lambda m, x, y: next_token_accuracy(m, x.tolist(), y),
             r"inputs must be a tensor of token ids, got list"),
            (lambda m, x, y: head_scores("model", x), r"model must be a torch.nn.Module, got str"),
            # scored as ids 0 and 1, and 0 + 0j ..., without a word
            (lambda m, x, y: next_token_accuracy(m, x, y > 0), r"targets must be integer ids, got torch.bool"),
            (lambda m, x, y: next_token_accuracy(m, x, y.to(torch.complex64)),
             r"targets must be integer ids, got torch.complex64"),
        ],
    )
    def test_models_and_ids_must_be_modules_and_tensors(self, call, message: str) -> None:
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        inputs, targets = lookback_data(2, 6, 4, torch.Generator().manual_seed(0))
        with pytest.raises(ValueError, match=message):
            call(model, inputs, targets)

    @pytest.mark.parametrize(("bad", "ids"), [(-1, "-1 to 2"), (4, "1 to 4"), (-101, "-101 to 2")])
    def test_target_ids_outside_the_vocabulary_are_refused(self, bad: int, ids: str) -> None:
        # scored as misses without a word; F.cross_entropy refuses them (-100 is not scored)
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        inputs = torch.tensor([[0, 1, 2, 3, 0, 1]])
        targets = torch.tensor([[-100, 1, 2, -100, 1, bad]])
        with pytest.raises(ValueError, match=rf"targets must be token ids in \[0, n_vocab=4\) or -100 \(not scored\), got ids from {ids}$"):
            next_token_accuracy(model, inputs, targets)

    def test_head_scores_refuse_a_model_without_attention_weights(self) -> None:
        class Weights(torch.nn.Module):
            def __init__(self, weights: object) -> None:
                super().__init__()
                self.weights = weights

            def forward(self, x: torch.Tensor, return_weights: bool = False) -> object:
                return None, self.weights

        inputs = torch.tensor([[0, 1, 0, 1]])
        # a TypeError: Linear.forward() got an unexpected keyword argument 'return_weights'
        with pytest.raises(ValueError, match=r"model must take return_weights=True .*got Linear, whose forward"):
            head_scores(torch.nn.Linear(2, 2), inputs)
        for weights, got in ((torch.ones(1, 2, 4, 4), r"\(1, 2, 4, 4\)"), ([torch.ones(1, 2, 4, 3)], r"\[\(1, 2, 4, 3\)\]"),
                             ([], r"\[\]")):
            with pytest.raises(ValueError, match=r"weights a list of one \(b, h, t, t\) = \(1, h, 4, 4\) tensor per layer, got " + got):
                head_scores(Weights(weights), inputs)

    @pytest.mark.parametrize(("generator", "got"), [(3, "3 of type int"), ("x", "'x' of type str")])
    @pytest.mark.parametrize(
        "draw",
        [lambda g: induction_data(1, 6, 8, g), lambda g: lookback_data(1, 6, 8, g), lambda g: recall_data(1, 2, 4, 4, g)],
        ids=["induction_data", "lookback_data", "recall_data"],
    )
    def test_data_refuse_a_generator_that_is_not_one(self, draw, generator: object, got: str) -> None:
        # a TypeError from torch.randint or torch.rand, listing its overloads
        with pytest.raises(ValueError, match=rf"generator must be a torch.Generator or None, got {got}"):
            draw(generator)

    def test_recall_data_refuses_more_distinct_keys_than_pairs(self):
        with pytest.raises(ValueError, match=r"at most min\(num_pairs, num_keys\) distinct keys, got 5"):
            recall_data(2, 4, 12, 8, distinct_keys=5)

    @pytest.mark.parametrize(("batch", "got"), [(5, "int"), ((torch.tensor([[0, 1]]),), "1 values"),
                                                (("inputs", "targets", "extra"), "3 values")])
    def test_train_lm_refuses_data_that_returns_no_pair(self, batch: object, got: str) -> None:
        # Python's "cannot unpack non-iterable int object" or "too many values to unpack"
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        with pytest.raises(ValueError, match=rf"data must return a batch \(inputs, targets\), got {got}$"):
            train_lm(model, lambda g: batch, 1)

    def test_train_lm_refuses_targets_that_do_not_line_up_with_the_logits(self) -> None:
        # both were flattened: targets (3, 2) against logits (2, 3, 4) trained on misaligned
        # targets, with a finite loss and without a word
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        inputs, targets = torch.tensor([[0, 1, 2], [3, 0, 1]]), torch.tensor([[1, 2], [3, 0], [1, 2]])
        with pytest.raises(ValueError, match=r"targets must have the logits' shape \(b, t\) = \(2, 3\), got \(3, 2\)"):
            train_lm(model, lambda g: (inputs, targets), 1)

    def test_train_lm_refuses_a_nan_loss_before_it_steps_the_model(self) -> None:
        # the nan loss was returned and stepped with: AdamW made every parameter nan, and
        # train_lm returned [nan, nan, ...] without a word
        torch.manual_seed(0)
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        with torch.no_grad():
            model.lm_head.weight[0, 0] = float("nan")
        before = copy.deepcopy(model.state_dict())
        with pytest.raises(ValueError, match=r"the loss of step 0 must be finite, got nan"):
            train_lm(model, lambda g: lookback_data(2, 6, 4, g), 2)
        torch.testing.assert_close(model.state_dict(), before, rtol=0, atol=0, equal_nan=True)

    @pytest.mark.parametrize("returned", ["tuple", "(b, t)"])
    def test_train_lm_and_accuracy_refuse_a_model_that_returns_no_logits(self, returned: str) -> None:
        # a tuple was Python's "'tuple' object has no attribute 'shape'"; logits (b, t) in
        # next_token_accuracy an IndexError of the mask, in train_lm a message about targets
        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embedding = torch.nn.Embedding(4, 4)

            def forward(self, idx: torch.Tensor) -> object:
                logits = self.embedding(idx)  # (b, t, 4)
                return (logits, None) if returned == "tuple" else logits[..., 0]

        inputs, targets = lookback_data(2, 6, 4, torch.Generator().manual_seed(0))
        got = "tuple" if returned == "tuple" else r"\(2, 6\)"
        with pytest.raises(ValueError, match=rf"model must return logits \(b, t, n_vocab\), got {got}$"):
            train_lm(Model(), lambda g: (inputs, targets), 1)
        with pytest.raises(ValueError, match=rf"logits \(b, t, n_vocab\) of the inputs' \(b, t\) = \(2, 6\), got {got}$"):
            next_token_accuracy(Model(), inputs, targets)

    def test_train_lm_refuses_a_batch_with_no_scored_target(self) -> None:
        # cross_entropy's mean over no target is nan, which train_lm returned as the loss
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        batch = torch.tensor([[0, 1, 2]]), torch.full((1, 3), -100)
        with pytest.raises(ValueError, match=r"targets of step 0 must have a scored entry \(not -100\), got none of 3"):
            train_lm(model, lambda g: batch, 1)

    @pytest.mark.parametrize(
        ("targets", "message"),
        [  # torch's RuntimeError (expected target dtype to be Long or Byte) or IndexError
            (torch.tensor([[1.0, 2.0, 3.0]]), r"targets must be integer ids, got torch.float32"),
            (torch.tensor([[True, False, True]]), r"targets must be integer ids, got torch.bool"),
            (torch.tensor([[1, 4, -100]]), r"\[0, n_vocab=4\) or -100 \(not scored\), got ids from 1 to 4$"),
            (torch.tensor([[-1, 2, -100]]), r"\[0, n_vocab=4\) or -100 \(not scored\), got ids from -1 to 2$"),
        ],
    )
    def test_train_lm_refuses_targets_that_are_not_ids_of_the_vocabulary(self, targets, message) -> None:
        model = TinyTransformer(4, 8, 2, 1, context_length=6)
        before = copy.deepcopy(model.state_dict())
        with pytest.raises(ValueError, match=message):
            train_lm(model, lambda g: (torch.tensor([[0, 1, 2]]), targets), 1)
        assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())  # no step
