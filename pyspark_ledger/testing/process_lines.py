"""A child process's stdout lines, read by a thread so the child never blocks on its pipe.

The test harnesses' writer processes print one line per event (ACK n, SENT, DONE, STOPPED ...);
a test waits for lines with a bound and reads them under one condition."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable


class ProcessLines:
    def __init__(self, proc: subprocess.Popen[str]):
        self.lines: list[str] = []
        self.ended = False  # the child closed its stdout (exited)
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def count(self, prefix: str) -> int:
        with self.cond:
            return sum(1 for x in self.lines if x.startswith(prefix))

    def acked(self) -> list[int]:
        """The entry numbers of every 'ACK <n> ...' line so far."""
        with self.cond:
            return [int(x.split()[1]) for x in self.lines if x.startswith("ACK ")]

    def wait_for(self, predicate: Callable[[], bool], bound_s: float) -> bool:
        """Wait until `predicate()` (called under the condition) holds or the child's output
        ends, at most `bound_s`; whether the predicate held."""
        with self.cond:
            self.cond.wait_for(lambda: predicate() or self.ended, bound_s)
            return predicate()

    def wait(self, prefix: str, bound_s: float) -> bool:
        """Wait for a line starting with `prefix`."""
        return self.wait_for(lambda: any(x.startswith(prefix) for x in self.lines), bound_s)
