"""The bytes a rank hands to the process group: what the ring and Ulysses send, counted at the call.

Notation (see CONTRIBUTING.md): N ranks. Every send of ``attention.distributed`` reports its
bytes here, so that a run can be set beside the counts of :func:`attention.ring.ring_attention_io`;
a backend may add its own headers on the wire, which this does not see.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ._common import OPEN_LOGS

__all__ = ["Traffic", "count_traffic"]


@dataclass
class Traffic:
    """Bytes this rank handed to the process group, by kind of operation ("p2p", "all_to_all",
    "all_gather"); an all-to-all counts only the slices that leave the rank.

    Args:
        sent: bytes so far, by kind.

    Examples:
        >>> log = Traffic()
        >>> log.add("p2p", 8)
        >>> log.sent
        {'p2p': 8}
    """

    sent: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, nbytes: int) -> None:
        """Count ``nbytes`` more of ``kind``."""
        self.sent[kind] = self.sent.get(kind, 0) + nbytes


@contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Count the bytes this rank sends in the calls inside the block (forward and backward).

    Returns:
        A context manager whose :class:`Traffic` fills while the block runs.

    Examples:
        >>> with count_traffic() as log:
        ...     pass  # ring_attention or ulysses_attention on every rank
        >>> log.sent
        {}
    """
    log = Traffic()
    OPEN_LOGS.append(log)
    try:
        yield log
    finally:
        OPEN_LOGS.remove(log)
