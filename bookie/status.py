"""Protocol outcome codes shared by the storage engine and the gRPC service.

The numbers are part of the wire protocol (the gRPC enum mirrors them): never renumber.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    UNAUTHORIZED = 4
    READ_ONLY = 5
    TOO_LARGE = 6
    # The bookie cannot say whether it has the entry (corrupt copy, or a repaired journal may
    # have lost it). Recovery must not treat this as "no such entry" (BookKeeper bug 2908).
    UNKNOWN_ENTRY_STATE = 7
    INVALID_REQUEST = 8
    BUSY = 9
    TIMEOUT = 10
    INTERNAL_ERROR = 11
