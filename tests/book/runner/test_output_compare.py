"""The comparison rule of the page runner: tokens equal, each number within one unit of its last
shown digit, integers exact, whitespace between tokens ignored."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from book.runner.compare import first_difference, number_matches, tolerance


@pytest.mark.parametrize(
    ("shown", "unit"),
    [
        ("0.4419", "0.0001"),
        ("-12.5", "0.1"),
        ("1.2346e-05", "1e-9"),
        ("1e-05", "1e-5"),
        ("3.0000e+00", "0.0001"),
        ("6", "0"),
        ("1.", "0"),
    ],
)
def test_tolerance_is_one_unit_of_the_last_shown_digit(shown: str, unit: str) -> None:
    assert tolerance(shown) == Decimal(unit)


@given(
    digits=st.integers(min_value=-99999, max_value=99999),
    places=st.integers(min_value=1, max_value=6),
    units=st.integers(min_value=-4, max_value=4),
)
@settings(max_examples=200, deadline=None)
def test_numbers_pass_within_one_unit_and_fail_beyond(digits: int, places: int, units: int) -> None:
    shown = Decimal(digits).scaleb(-places)
    actual = shown + Decimal(units).scaleb(-places)
    assert number_matches(str(shown), str(actual)) == (abs(units) <= 1)


def test_a_number_printed_with_more_digits_is_judged_at_the_shown_precision() -> None:
    assert number_matches("0.4419", "0.44194")
    assert number_matches("0.4419", "4.4186e-01")
    assert not number_matches("0.4419", "0.44205")


def test_integers_must_match_exactly_and_stay_integers() -> None:
    assert number_matches("6", "6")
    assert not number_matches("6", "7")
    assert not number_matches("6", "6.0")
    assert first_difference("torch.Size([2, 6, 4])", "torch.Size([2, 6, 3])") is not None


def test_whitespace_between_tokens_is_ignored() -> None:
    shown = "tensor([ True, False,  True])\n"
    assert first_difference(shown, "tensor([True, False, True])") is None
    assert (
        first_difference("tensor([[ 0.1000, -0.2000]])", "tensor([[0.1000,\n  -0.2000]])") is None
    )


def test_whitespace_that_separates_tokens_still_counts() -> None:
    assert first_difference("1 2", "12") is not None
    assert first_difference("grad fn", "gradfn") is not None


def test_words_signs_and_special_values_must_match() -> None:
    assert first_difference("tensor([-inf, 2.])", "tensor([-inf, 2.])") is None
    assert first_difference("tensor([nan])", "tensor([nan])") is None
    assert first_difference("tensor([-inf])", "tensor([inf])") is not None
    assert first_difference("True", "False") is not None
    assert first_difference("float32", "float64") is not None


def test_the_first_difference_names_line_and_values() -> None:
    difference = first_difference("a 1.0\nb 0.4419\n", "a 1.0\nb 0.4425\n")
    assert difference is not None
    assert difference.line == 2
    assert "expected 0.4419, got 0.4425" in difference.describe()


def test_missing_and_extra_tokens_are_differences() -> None:
    ending = first_difference("tensor([1, 2])", "tensor([1, 2")
    assert ending is not None and "ends before" in ending.reason
    extra = first_difference("done", "done 3")
    assert extra is not None and "goes on with '3'" in extra.reason


@pytest.mark.parametrize(("expected", "actual", "agree"), [
    ("~4e-16", "~4e-16", True),
    ("~4e-16", "~7e-16", True),  # another machine's roundings
    ("~4e-16", "~4e-15", True),
    ("~4e-16", "~5e-17", True),
    ("~4e-16", "~5e-15", False),  # more than ten times larger: not a rounding difference
    ("~4e-16", "~3e-17", False),
    ("~4e-16", "~-4e-16", False),
    ("~0e+00", "~0e+00", True),
    ("~0e+00", "~1e-300", False),
    ("~4e-16", "4e-16", False),  # an order of magnitude is printed as one, with its tilde
])
def test_a_number_after_a_tilde_is_an_order_of_magnitude(expected: str, actual: str, agree: bool) -> None:
    difference = first_difference(f"largest difference: {expected}", f"largest difference: {actual}")
    assert (difference is None) == agree
    if not agree:
        assert difference.expected == expected and "factor of 10" in difference.reason


def test_a_tilde_not_before_a_number_is_punctuation() -> None:
    assert first_difference("x ~ 0.5", "x ~ 0.5") is None
    assert first_difference("x ~ 0.5", "x ~ 0.7") is not None
