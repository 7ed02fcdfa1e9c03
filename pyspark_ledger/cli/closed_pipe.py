"""`ledger ... | head` must end quietly with exit 0 when the reader closes the pipe early, as
Unix tools do, instead of a BrokenPipeError traceback or "exit 1" (the Python documentation's
recipe: point stdout at /dev/null so the interpreter's final flush cannot fail again)."""

from __future__ import annotations

import os
import sys
from typing import Protocol


class Main(Protocol):
    """A command's entry point: `argv` None means the process's own arguments."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def exit_quietly_on_closed_pipe(main: Main) -> Main:
    def run(argv: list[str] | None = None) -> int:
        try:
            code = main(argv)
            sys.stdout.flush()  # a closed pipe shows up here when the output was buffered
            return code
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0

    return run
