"""The command line: run seeds (over processes with --jobs), print the rate, the fault mix and
every violation with the command that replays it; exit 1 on any violation."""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

from pyspark_ledger.testing.sim.autorecovery import is_autorecovery_counter
from pyspark_ledger.testing.sim.runner import SeedResult, run_seed

FAILURES_SHOWN_MAX = 5
PROGRESS_EVERY_S = 30.0


def _run_range(bounds: tuple[int, int]) -> tuple[int, Counter[str], list[SeedResult], int]:
    """Seeds [first, last) in one process: (seeds run, faults and activity, failing results,
    events). Activity counters are kept apart by a "+" prefix."""
    first, last = bounds
    faults: Counter[str] = Counter()
    failures: list[SeedResult] = []
    events = 0
    for seed in range(first, last):
        r = run_seed(seed)
        faults.update(r.faults)
        faults.update({f"+{k}": v for k, v in r.stats.items()})
        events += r.events
        if r.violation is not None:
            failures.append(r)
    return last - first, faults, failures, events


def _ranges(first: int, count: int, chunk: int) -> list[tuple[int, int]]:
    return [(s, min(s + chunk, first + count)) for s in range(first, first + count, chunk)]


def replay_command(seed: int) -> str:
    return f"python -m pyspark_ledger.testing.sim --replay {seed} --trace"


Progress = Callable[[int, int], None]  # (seeds run so far, violations so far)


def run_many(first: int, count: int, jobs: int,
             progress: Progress | None = None) -> tuple[int, Counter[str], list[SeedResult], int]:
    chunk = max(1, min(500, count // max(1, jobs * 8)))
    ranges = _ranges(first, count, chunk)
    total, faults, failures, events = 0, Counter[str](), [], 0

    def add(part: tuple[int, Counter[str], list[SeedResult], int]) -> None:
        nonlocal total, events
        n, f, bad, ev = part
        total, events = total + n, events + ev
        faults.update(f)
        failures.extend(bad)
        if progress is not None:
            progress(total, len(failures))

    if jobs <= 1:
        for part in map(_run_range, ranges):
            add(part)
    else:
        # spawn, not fork: a forked worker inherits the caller's gRPC objects (a test process, or
        # any program using the client), and collecting one in the child can wait forever on a
        # lock held by a thread the fork left behind (seen in the whole suite, gRPC fork handlers off).
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for part in pool.imap(_run_range, ranges):
                add(part)
    failures.sort(key=lambda r: r.seed)
    return total, faults, failures, events


def progress_to_stderr(count: int, every_s: float = PROGRESS_EVERY_S) -> Progress:
    """A long run says how far it got (on stderr, at most every `every_s` of wall time)."""
    started = time.perf_counter()
    shown = [started]

    def show(done: int, violations: int) -> None:
        now = time.perf_counter()
        if now - shown[0] >= every_s or done == count:
            shown[0] = now
            print(f"progress: {done}/{count} seeds, {violations} violations, {done / max(now - started, 1e-9):.1f} "
                  f"seeds/s", file=sys.stderr, flush=True)

    return show


def print_report(total: int, faults: Counter[str], failures: Sequence[SeedResult], events: int, elapsed_s: float) -> None:
    print(f"seeds run: {total}")
    print(f"seeds per second: {total / max(elapsed_s, 1e-9):.1f} ({elapsed_s:.1f} s, {events} events)")
    by_count = sorted(faults.items(), key=lambda kv: (-kv[1], kv[0]))
    _print_counters("faults injected by kind:", [(k, n) for k, n in by_count
                                                 if not k.startswith("+") and not is_autorecovery_counter(k)])
    _print_counters("autorecovery faults:", [(k, n) for k, n in by_count
                                             if not k.startswith("+") and is_autorecovery_counter(k)])
    activity = sorted((k[1:], n) for k, n in faults.items() if k.startswith("+"))
    _print_counters("what the histories exercised:", [(k, n) for k, n in activity if not is_autorecovery_counter(k)])
    _print_counters("what autorecovery did:", [(k, n) for k, n in activity if is_autorecovery_counter(k)])
    print(f"violations: {len(failures)}")
    for r in failures[:FAILURES_SHOWN_MAX]:
        print(f"\nseed {r.seed}: {r.violation}")
        print(f"  replay: {replay_command(r.seed)}")
        for line in r.trace_tail:
            print(f"  {line}")
    if len(failures) > FAILURES_SHOWN_MAX:
        print(f"\n... and {len(failures) - FAILURES_SHOWN_MAX} more failing seeds: {[r.seed for r in failures][:50]}")


def _print_counters(title: str, rows: Sequence[tuple[str, int]]) -> None:
    print(title)
    for kind, n in rows:
        print(f"  {kind:<40} {n:>10}")


def replay(seed: int, trace: bool, autorecovery: bool | None = None) -> int:
    r = run_seed(seed, trace=trace, autorecovery=autorecovery)
    if trace and r.trace_all is not None:
        for line in r.trace_all:
            print(line)
    print(f"seed {seed}: {r.events} events, trace hash {r.trace_hash:08x}, faults {dict(sorted(r.faults.items()))}")
    if r.violation is None:
        print("no violation")
        return 0
    print(f"VIOLATION: {r.violation}")
    if not trace:
        print("last events:")
        for line in r.trace_tail:
            print(f"  {line}")
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyspark_ledger.testing.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="processes (seed ranges are split among them)")
    parser.add_argument("--replay", type=int, default=None, help="run one seed and print its history")
    parser.add_argument("--trace", action="store_true", help="with --replay: print every event")
    parser.add_argument("--no-autorecovery", action="store_true",
                        help="with --replay: the seed's history without auditors and workers (as before they joined)")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay, args.trace, False if args.no_autorecovery else None)
    if args.seeds < 1 or args.jobs < 1:
        parser.error("--seeds and --jobs must be positive")
    started = time.perf_counter()  # the rate only: no history depends on it
    total, faults, failures, events = run_many(args.first_seed, args.seeds, args.jobs, progress_to_stderr(args.seeds))
    print_report(total, faults, failures, events, time.perf_counter() - started)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
