"""The book's running example: six tokens of "Your journey starts with one step".

Notation: b batch size, t tokens (t = 6 here), d_in width of a token vector (d_in = 3 here).
Each token is a row of ``journey_inputs()``: token i of the prose (counted from 1) is row i - 1.
"""

import torch
from torch import Tensor

JOURNEY_TOKENS = ("Your", "journey", "starts", "with", "one", "step")


def journey_inputs() -> Tensor:
    """The six 3-d token vectors of the running example, shape (t, d_in) = (6, 3).

    Returns:
        A new tensor (6, 3) each call; row i - 1 is token x^(i) of the prose.

    Examples:
        >>> journey_inputs()[1]  # "journey", x^(2)
        tensor([0.5500, 0.8700, 0.6600])
    """
    return torch.tensor(
        [
            [0.43, 0.15, 0.89],  # Your     x^(1)
            [0.55, 0.87, 0.66],  # journey  x^(2)
            [0.57, 0.85, 0.64],  # starts   x^(3)
            [0.22, 0.58, 0.33],  # with     x^(4)
            [0.77, 0.25, 0.10],  # one      x^(5)
            [0.05, 0.80, 0.55],  # step     x^(6)
        ]
    )


def journey_batch() -> Tensor:
    """Two stacked copies of :func:`journey_inputs`, shape (b, t, d_in) = (2, 6, 3).

    Returns:
        A new tensor (2, 6, 3).

    Examples:
        >>> journey_batch().shape
        torch.Size([2, 6, 3])
    """
    inputs = journey_inputs()  # (t, d_in)
    return torch.stack((inputs, inputs), dim=0)  # (b, t, d_in)
