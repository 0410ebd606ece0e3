"""RoPE written out pair by pair: the reference test_positions and test_rope_scaling share."""

import math


def rotate_pairs_by_hand(x: list[float], p: int, interleaved: bool, base: float) -> list[float]:
    """Rotate feature pair i of one token at position p by p base^(-2i/d), pair by pair."""
    d = len(x)
    out = list(x)
    for i in range(d // 2):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        angle = p * base ** (-2 * i / d)
        out[a] = x[a] * math.cos(angle) - x[b] * math.sin(angle)
        out[b] = x[a] * math.sin(angle) + x[b] * math.cos(angle)
    return out
