"""Output for the admin shell: tables or JSON on stdout, progress bars on a terminal only."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from tqdm import tqdm


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
    """A progress bar (tqdm, on stderr so stdout stays clean for pipes) whenever stderr is a
    terminal; never with `quiet` (JSON output) and never when stderr is a pipe or a file."""

    def __init__(self, label: str, total: int | None = None, *, quiet: bool = False):
        self.label = label
        self.enabled = not quiet and sys.stderr.isatty()
        self._bar = tqdm(desc=label, total=total, file=sys.stderr, disable=not self.enabled)

    def update(self, n: int | None = None) -> None:
        """One more done, or (n) this many done so far."""
        if n is None:
            self._bar.update(1)
        else:
            self._bar.update(n - self._bar.n)

    def done(self) -> None:
        self._bar.close()
