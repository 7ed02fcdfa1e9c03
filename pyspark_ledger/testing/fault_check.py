"""What a fault run checks: payloads that name their writer and sequence number and carry their
own checksum, and the counters computed from the acknowledgements against what reads back.

Payload: b"FLT1|<writer>|<seq:010d>|<crc32c of the filler:08x>|" then a filler derived from
(writer, seq), padded to the requested size. A changed byte anywhere makes it `corrupt`.

Counters (all must be 0):
- lost: acknowledged (writer, seq) not in the log read back.
- duplicated: a (writer, seq) that appears more than once in the log. The workload never
  re-sends an append (LogWriter.append has no retry: an unknown outcome is an error to the
  caller), so no duplicate is allowed.
- reordered: entries of one writer whose seqs do not increase along the log, or a writer's
  entries that appear after a later writer's (the log's writers follow each other).
- corrupt: an entry whose payload does not decode or whose checksum does not match.
- past_lac: an entry a tailing reader was given that the log read back at the end does not
  hold at that position with that payload (a reader that reads past the LAC sees entries
  that recovery may drop or that may never be acknowledged).
- stalled: operations that did not end within their bound (an append, a writer's exit, a read).
Unacknowledged entries of a writer that died or was fenced may appear (their outcome was
unknown to the writer); they are counted as `unacked_present`, for information only.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

MARKER = b"FLT1|"

Place = tuple[int, int, int]  # (ledger seq, entry id, index in the entry): one message's position


def encode(writer: str, seq: int, size: int = 64) -> bytes:
    if "|" in writer:
        raise ValueError("a writer name may not contain '|'")
    seed = hashlib.sha256(f"{writer}/{seq}".encode()).digest()
    header_len = len(MARKER) + len(writer) + 21  # "<writer>|<seq:010d>|<crc:08x>|"
    filler_len = max(size - header_len, 8)
    filler = (seed * (filler_len // len(seed) + 1))[:filler_len]
    return MARKER + f"{writer}|{seq:010d}|{crc32c(filler):08x}|".encode() + filler


def decode(payload: bytes) -> tuple[str, int] | None:
    """(writer, seq) of an intact payload, None for a corrupt one."""
    if not payload.startswith(MARKER):
        return None
    parts = payload[len(MARKER):].split(b"|", 3)
    if len(parts) != 4:
        return None
    try:
        writer, seq, crc = parts[0].decode(), int(parts[1]), int(parts[2], 16)
    except ValueError:
        return None
    filler = parts[3]
    if crc32c(filler) != crc:
        return None
    if encode(writer, seq, len(payload)) != payload:
        return None
    return writer, seq


@dataclass
class FaultCounters:
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    corrupt: int = 0
    past_lac: int = 0
    stalled: int = 0
    acked: int = 0
    read_back: int = 0
    unacked_present: int = 0
    writers_stopped: int = 0  # writers that ended with an error (expected only when fenced)
    tailed: int = 0  # entries the tailing reader was given (what past_lac was checked on)
    rounds: int = 0

    SAFETY = ("lost", "duplicated", "reordered", "corrupt", "past_lac", "stalled")

    def add(self, other: FaultCounters) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def violations(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.SAFETY if getattr(self, name)}


@dataclass
class RunRecord:
    """What one fault round saw: acknowledged (writer, seq) per writer in their order, the
    writers in the order they held the log, entries a tailing reader was given as
    (position, payload), and operations that did not end within their bound."""

    writers: list[str] = field(default_factory=list)
    acked: dict[str, list[int]] = field(default_factory=dict)
    tailed: list[tuple[Place, bytes]] = field(default_factory=list)
    stalled: list[str] = field(default_factory=list)


def check(record: RunRecord, log_entries: Sequence[tuple[Place, bytes]]) -> FaultCounters:
    """Count violations of `record` against the whole log read back at the end, given as
    ((ledger seq, entry id, index), payload) in log order (index: the message in a batch)."""
    c = FaultCounters(rounds=1, stalled=len(record.stalled), read_back=len(log_entries), tailed=len(record.tailed))
    seen: dict[tuple[str, int], int] = {}
    last_seq: dict[str, int] = {}
    writer_rank = {w: i for i, w in enumerate(record.writers)}
    highest_rank = -1
    for _pos, payload in log_entries:
        key = decode(payload)
        if key is None:
            c.corrupt += 1
            continue
        seen[key] = seen.get(key, 0) + 1
        writer, seq = key
        if seq < last_seq.get(writer, -1):
            c.reordered += 1
        last_seq[writer] = max(seq, last_seq.get(writer, -1))
        rank = writer_rank.get(writer, len(writer_rank))
        if rank < highest_rank:
            c.reordered += 1  # an earlier writer's entry after a later writer's
        highest_rank = max(highest_rank, rank)
    c.duplicated = sum(n - 1 for n in seen.values() if n > 1)
    acked_keys = {(w, s) for w, seqs in record.acked.items() for s in seqs}
    c.acked = len(acked_keys)
    c.lost = len(acked_keys - set(seen))
    c.unacked_present = len(set(seen) - acked_keys)
    for seqs in record.acked.values():
        c.reordered += sum(1 for a, b in zip(seqs, seqs[1:]) if b <= a)  # acks out of order
    c.past_lac = count_past_lac(record.tailed, log_entries)
    return c


def count_past_lac(tailed: Iterable[tuple[Place, bytes]],
                   log_entries: Sequence[tuple[Place, bytes]]) -> int:
    final = dict(log_entries)
    return sum(1 for pos, payload in tailed if final.get(pos) != payload)


_LABELS = {"unacked_present": "unacked", "writers_stopped": "w_stopped", "read_back": "read"}


def format_table(rows: dict[str, FaultCounters]) -> str:
    cols = ("rounds", "acked", "read_back", "tailed", "unacked_present", "writers_stopped") + FaultCounters.SAFETY
    width = max([len("fault")] + [len(k) for k in rows])
    head = "fault".ljust(width) + "".join(f" {_LABELS.get(c, c):>10}" for c in cols)
    lines = [head, "-" * len(head)]
    for name, cnt in rows.items():
        lines.append(name.ljust(width) + "".join(f" {getattr(cnt, c):>10}" for c in cols))
    return "\n".join(lines)
