"""Output for the admin shell: tables or JSON on stdout, progress bars on a terminal only."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False, default=str))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    rows = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


class Progress:
    """A one-line progress bar (drawn on stderr, so stdout stays clean for pipes) when stdout is a
    terminal; silent otherwise, e.g. under cron or in a pipeline."""

    def __init__(self, label: str, total: int | None = None):
        self.label, self.total = label, total
        self.enabled = sys.stdout.isatty() and sys.stderr.isatty()
        self.n = 0

    def update(self, n: int | None = None) -> None:
        self.n = self.n + 1 if n is None else n
        if not self.enabled:
            return
        if self.total:
            filled = int(30 * self.n / max(self.total, 1))
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.n}/{self.total}")
        else:
            sys.stderr.write(f"\r{self.label} {self.n}")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
