"""bench/client_bench.py's LogWriter rows: batched and unbatched messages (issue 30).

- rate: messages/s a producer gets from LogWriter.append_async with at most WINDOW_MESSAGES
  unacknowledged (the producer waits for the oldest once the window is full), for 1 and 4
  producers (threads of one process, each the writer of its own log);
- latency: p50/p99 from append_async to the message's acknowledgement, paced at 10% and 90% of
  the measured peak (a burst every PACE_TICK_S);
- compare: alternating rounds of batched and unbatched 100-byte messages from one producer, in
  the same run, reported as medians and their ratio;
- disk ratio (issue 30): alternating rounds of this disk's sequential write + fdatasync bandwidth
  (machine_speed.write_fsync_mb_s, in the bookies' own directory) and batched 1 KiB messages from
  one producer, same run, medians: the messages' MB/s against the disk's divided by three (three
  bookies on one disk journal every byte three times), the issue's bound being 0.8;
- stamps (issue 32): alternating rounds of batched 100-byte messages, same run, medians, one row
  each (STAMP_KINDS): plain; an event time and a constant header (("trace", 16 bytes), the same
  object every message); an event time and a header value of its own per message; the cost of
  each stamped kind against plain (the issue's bound: at most 5%).
Works against releases without batches too (batching=None: the call of those releases).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from typing import Any

from pyspark_ledger.client import LedgerClient

WINDOW_MESSAGES = 20_000
PACE_TICK_S = 0.002
_names = iter(range(10**9))


def _writer(client: LedgerClient, batching: bool | None) -> Any:
    name = f"bench-{next(_names)}-{time.monotonic_ns()}"
    return client.open_log_writer(name) if batching is None else client.open_log_writer(name, batching=batching)


STAMP_HEADERS = [("trace", b"0123456789abcdef")]
# Headers whose value changes from message to message (a trace id each): made before the clock starts.
VARYING_HEADERS = [[("trace", b"%016x" % i)] for i in range(4096)]


def produce(client: LedgerClient, size: int, total: int, batching: bool | None, stamped: bool | str = False) -> float:
    """Messages/s of one producer: pipelined append_async, bounded window; `stamped`: each message
    with an event time and STAMP_HEADERS ("varying": an event time and a header value of its own,
    VARYING_HEADERS)."""
    w = _writer(client, batching)
    start = time.perf_counter()
    append_loop(w, size, total, stamped, flush=bool(batching))
    elapsed = time.perf_counter() - start
    w.close()
    return total / elapsed


def append_loop(w: Any, size: int, total: int, stamped: bool | str = False, *, flush: bool = True) -> None:
    """One producer's loop (produce's, and bench/stamps_cost.py's without bookies): `total`
    messages of `size` bytes by w.append_async, at most WINDOW_MESSAGES unsettled (it waits for
    the oldest once the window is full); then flush (a batching writer) and wait for every one."""
    payload = b"p" * size
    window: deque[Any] = deque()
    append = w.append_async
    event_ms = time.time_ns() // 1_000_000
    for i in range(total):
        if len(window) >= WINDOW_MESSAGES:
            window.popleft().result(timeout=120)
        if stamped == "varying":
            window.append(append(payload, timestamp=event_ms + i, headers=VARYING_HEADERS[i & 4095]))
        elif stamped:
            window.append(append(payload, timestamp=event_ms, headers=STAMP_HEADERS))
        else:
            window.append(append(payload))
    if flush:
        w.flush()
    for h in window:
        h.result(timeout=120)


def messages(client: LedgerClient, size: int, total: int, batching: bool = True) -> tuple[float, float]:
    """Messages of one producer, batched or not (bench/ab_runs.py's kinds `messages` and
    `unbatched`): msgs/s and this process's CPU us per message."""
    from pyspark_ledger.testing.message_batches import set_message_batches

    set_message_batches(client, True)
    cpu = time.process_time()
    rate = produce(client, size, total, batching)
    return rate, (time.process_time() - cpu) / total * 1e6


def unbatched(client: LedgerClient, size: int, total: int) -> tuple[float, float]:
    """`messages` with batching off: one entry per message."""
    return messages(client, size, total, batching=False)


def produce_parallel(client: LedgerClient, size: int, total: int, batching: bool | None, producers: int) -> float:
    """Messages/s of `producers` threads together, each writing total/producers messages."""
    rates: list[float] = []
    each = total // producers
    threads = [threading.Thread(target=lambda: rates.append(produce(client, size, each, batching)))
               for _ in range(producers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return each * producers / (time.perf_counter() - start)


def paced_latency(client: LedgerClient, size: int, rate: float, seconds: float) -> tuple[float, float]:
    """p50/p99 ms of a batched message from append_async to acknowledgement at `rate` msgs/s."""
    w = _writer(client, True)
    payload = b"l" * size
    samples: list[float] = []
    per_tick = max(1, round(rate * PACE_TICK_S))
    start = time.perf_counter()
    sent, handles = 0, []
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate)
        while sent < due:
            for _ in range(min(per_tick, due - sent)):
                t = time.perf_counter()
                h = w.append_async(payload)
                h.add_done_callback(lambda _h, t=t: samples.append(time.perf_counter() - t))
                handles.append(h)
                sent += 1
        time.sleep(PACE_TICK_S)
    w.flush()
    for h in handles:
        h.result(timeout=120)
    w.close()
    samples.sort()
    return statistics.median(samples) * 1000, samples[max(int(len(samples) * 0.99) - 1, 0)] * 1000


# What each row of stamps_rows measures (issue 32), as the table says it.
STAMP_KINDS: dict[bool | str, str] = {
    False: "plain: no event time, no header",
    True: "event time + constant header (the same ('trace', 16 B) object each message)",
    "varying": "event time + own header value (('trace', 16 B of its own), time + i, each message)",
}


def stamps_rows(client: LedgerClient, messages: int,
                rounds: int) -> list[tuple[str, int, float, float, float, str]]:
    """Batched 100-byte messages plain, with an event time and a constant header, and with an
    event time and a header value of their own, alternating rounds (each kind first, middle and
    last in turn), same run: one row per kind with its median rate, the cost against plain, and
    the client's CPU per message (this process: the producer, the linger and transport threads;
    the steadier figure on a loaded machine)."""
    kinds = tuple(STAMP_KINDS)
    rate: dict[bool | str, list[float]] = {k: [] for k in kinds}
    cpu_us: dict[bool | str, list[float]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds[r % 3:] + kinds[:r % 3]:
            cpu = time.process_time()
            rate[kind].append(produce(client, 100, messages, True, stamped=kind))
            cpu_us[kind].append((time.process_time() - cpu) / messages * 1e6)
    p, pc = statistics.median(rate[False]), statistics.median(cpu_us[False])
    out = []
    for kind, what in STAMP_KINDS.items():
        m, c = statistics.median(rate[kind]), statistics.median(cpu_us[kind])
        cost = "" if kind is False else f"; rate {100 * (1 - m / p):.1f}% below plain, CPU {100 * (c / pc - 1):+.1f}%"
        print(f"100 B batched, {what}: median of {rounds} alternating rounds {m:,.0f} msgs/s, {c:.2f} us client CPU a "
              f"message{cost} (rounds {[round(x) for x in rate[kind]]})")
        out.append((f"LogWriter batched {'plain' if kind is False else 'stamped' if kind is True else 'own hdr'}",
                    100, m, float("nan"), float("nan"), what + cost))
    return out


DISK_RATIO_BOUND = 0.8  # issue 30: batched 1 KiB messages >= 0.8 x disk write+fsync / 3


def disk_ratio_row(client: LedgerClient, messages: int, rounds: int,
                   directory: str) -> tuple[str, int, float, float, float, str]:
    """Batched 1 KiB messages (MB/s) against this disk's write + fdatasync bandwidth / 3,
    measured alternately in the same run (each round in the other order), medians; the client's
    CPU per message beside it."""
    from machine_speed import write_fsync_mb_s

    disk: list[float] = []
    rate: list[float] = []
    cpu_us: list[float] = []
    for r in range(rounds):
        for step in (("disk", "messages") if r % 2 == 0 else ("messages", "disk")):
            if step == "disk":
                disk.append(write_fsync_mb_s(directory))
                continue
            cpu = time.process_time()
            rate.append(produce(client, 1024, messages, True))
            cpu_us.append((time.process_time() - cpu) / messages * 1e6)
    d, m, c = statistics.median(disk), statistics.median(rate), statistics.median(cpu_us)
    mb_s = m * 1024 / 1e6
    ratio = mb_s / (d / 3)
    print(f"1 KiB batched from one producer, medians of {rounds} alternating rounds: {m:,.0f} msgs/s = {mb_s:.1f} MB/s "
          f"({c:.2f} us client CPU a message); disk write + fdatasync {d:,.0f} MB/s, / 3 = {d / 3:.1f} MB/s; ratio "
          f"{ratio:.2f} (bound {DISK_RATIO_BOUND}: {'met' if ratio >= DISK_RATIO_BOUND else 'NOT met'}) (rounds: "
          f"messages {[round(x) for x in rate]}, disk {[round(x) for x in disk]} MB/s)")
    return ("LogWriter batched vs disk/3", 1024, m, float("nan"), float("nan"),
            f"{ratio:.2f} of disk write+fsync/3 ({d:,.0f} MB/s / 3)")


def rows(client: LedgerClient, messages: int, rounds: int) -> list[tuple[str, int, float, float, float, str]]:
    """(system, size, msgs/s, p50 ms, p99 ms, note) rows for client_bench's table."""
    from pyspark_ledger.testing.message_batches import set_message_batches

    set_message_batches(client, True)  # on by default; a cluster may have turned it off (docs/upgrading.md)
    out = []
    batched_100, unbatched_100 = [], []
    for _ in range(rounds):  # alternating rounds, same run: the ratio the issue asks for
        batched_100.append(produce(client, 100, messages, True))
        unbatched_100.append(produce(client, 100, max(messages // 10, 5_000), False))
    b, u = statistics.median(batched_100), statistics.median(unbatched_100)
    out += stamps_rows(client, messages, max(rounds, 3))
    print(f"100 B from one producer, medians of {rounds} alternating rounds: batched {b:,.0f} msgs/s, "
          f"unbatched {u:,.0f} msgs/s, ratio {b / u:.1f}x")
    for size in (100, 1024):
        for batching in (True, False):
            n = messages if batching else max(messages // 10, 5_000)
            for producers in (1, 4):
                rate = b if (size, batching, producers) == (100, True, 1) else \
                    u if (size, batching, producers) == (100, False, 1) else \
                    produce_parallel(client, size, n, batching, producers)
                p50 = p99 = float("nan")
                if batching and producers == 1:
                    lo = paced_latency(client, size, rate * 0.1, 3.0)
                    hi = paced_latency(client, size, rate * 0.9, 3.0)
                    print(f"batched {size} B message latency: p50/p99 {lo[0]:.2f}/{lo[1]:.2f} ms at 10% of peak, "
                          f"{hi[0]:.2f}/{hi[1]:.2f} ms at 90%")
                    p50, p99 = lo
                label = f"LogWriter {'batched' if batching else 'unbatched'} x{producers}"
                out.append((label, size, rate, p50, p99, "per message; latency at 10% of peak"))
    return out
