"""The payloads of a run of adds (WriteHandle.add_entries_async), checked and as bytes.

A run arrives as a list of bytes-like objects or as a pyarrow binary / large_binary array (an
Arrow column of payloads, as a Spark writer or a batching producer holds them). pyarrow is not
imported here: an array is recognised by its type's id, so a plain producer that never passes
one pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pyspark_ledger.errors import LedgerError

__all__ = ["RunPayloads", "run_payloads"]


class RunPayloads(Protocol):
    """What add_entries_async needs of an Arrow array (pyarrow.BinaryArray, LargeBinaryArray)."""

    @property
    def type(self) -> Any: ...

    @property
    def null_count(self) -> int: ...

    def to_pylist(self) -> list[Any]: ...

    def __len__(self) -> int: ...


_ARROW_BINARY_TYPES = ("binary", "large_binary")
_BYTES = {bytes}


def run_payloads(payloads: Sequence[bytes] | RunPayloads, entry_bytes_max: int) -> list[bytes]:
    """The run's payloads as a list of bytes: at least one, none over `entry_bytes_max`; a clear
    TypeError or LedgerError naming the first bad one otherwise."""
    if not isinstance(payloads, Sequence):  # an Arrow array (RunPayloads)
        if not hasattr(payloads, "null_count"):
            raise TypeError(f"a run of payloads is a list of bytes or an Arrow binary array, not {type(payloads).__name__}")
        type_name = str(payloads.type)
        if type_name not in _ARROW_BINARY_TYPES:
            raise TypeError(f"an Arrow run of payloads must be binary or large_binary, not {type_name}")
        if payloads.null_count:
            raise TypeError(f"an Arrow run of payloads holds {payloads.null_count} nulls: every entry needs bytes")
        datas: list[bytes] = payloads.to_pylist()
    elif isinstance(payloads, (bytes, bytearray, memoryview, str)):
        raise TypeError("add_entries_async takes a sequence of payloads; for one payload use add_entry_async")
    elif set(map(type, payloads)) <= _BYTES:  # the common case, checked by a C-level loop
        datas = list(payloads)
    else:
        datas = []
        for i, p in enumerate(payloads):
            if isinstance(p, bytes):
                datas.append(p)
            elif isinstance(p, (bytearray, memoryview)):
                datas.append(bytes(p))
            else:
                raise TypeError(f"payload {i} of the run must be bytes, not {type(p).__name__}")
    if not datas:
        raise LedgerError("a run of adds needs at least one payload")
    longest = max(map(len, datas))
    if longest > entry_bytes_max:
        i = next(i for i, d in enumerate(datas) if len(d) == longest)
        raise LedgerError(f"payload {i} of the run, {longest} bytes, exceeds the maximum entry of {entry_bytes_max}")
    return datas
