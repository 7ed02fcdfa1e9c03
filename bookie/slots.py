"""Bounded slots per key and in all: how many long polls (bookie/long_polls.py) or add-listener
connections (bookie/add_listener.py) one client, and everybody together, may hold at once.

A slot is taken without waiting: beyond a bound the caller is refused at once (a wait here would
itself hold a thread or a connection, the very thing the bound protects).
"""

from __future__ import annotations

import threading

from bookie.storage.errors import ensure

# Distinct keys tracked at most: a key leaves the table with its last slot, so this bounds the
# table only while that many distinct clients hold slots at once (each holds at least one).
KEYS_MAX = 1 << 16


class KeyedSlots:
    def __init__(self, total_max: int, per_key_max: int, what: str):
        ensure(total_max >= 0 and per_key_max >= 0, f"{what}: bounds must be >= 0")
        self.total_max = total_max
        self.per_key_max = per_key_max
        self.what = what
        self._held: dict[str, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def try_take(self, key: str) -> str | None:
        """Take a slot for `key`; None when taken, else why not (for the refusal's message)."""
        with self._lock:
            if self._total >= self.total_max:
                return f"at the limit of {self.total_max} {self.what} on this bookie"
            held = self._held.get(key, 0)
            if held >= self.per_key_max:
                return f"at the limit of {self.per_key_max} {self.what} per client ({key})"
            if held == 0 and len(self._held) >= KEYS_MAX:
                return f"at the limit of {KEYS_MAX} clients holding {self.what}"
            self._held[key] = held + 1
            self._total += 1
            return None

    def release(self, key: str) -> None:
        with self._lock:
            held = self._held.get(key, 0)
            ensure(held > 0 and self._total > 0, f"{self.what}: a slot released that was not taken")
            if held == 1:
                del self._held[key]
            else:
                self._held[key] = held - 1
            self._total -= 1

    def total(self) -> int:
        with self._lock:
            return self._total

    def held_by(self, key: str) -> int:
        with self._lock:
            return self._held.get(key, 0)
