"""An actor that is a process which can crash and restart (the auditor, a replication worker).

A crash voids every callback the process was waiting for (its timers, bookie replies and metadata
replies): they belong to an incarnation that is gone. A request already sent still lands (a
metadata operation in flight is applied, a copy in flight reaches the bookie). The process's
metadata session expires SESSION_TIMEOUT_S after the crash, and with it every lock it held; the
restarted process opens a new session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.bookie import SimBookie

SESSION_TIMEOUT_S = 1.0


class Process(Actor):
    def __init__(self, cluster: Cluster, name: str):
        super().__init__(cluster, name)
        self.incarnation = 0
        self.running = True
        self.session = cluster.store.new_session()

    def _alive(self, incarnation: int, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            if incarnation == self.incarnation and self.running:
                fn()
        return run

    def later(self, delay_s: float, fn: Callable[[], None], label: str) -> None:
        super().later(delay_s, self._alive(self.incarnation, fn), label)

    def call_bookie(self, bookie_id: str, request: Callable[[SimBookie, Callable[[Any], None]], None],
                    on_reply: Callable[[Any], None], on_timeout: Callable[[], None], timeout_s: float,
                    label: str) -> None:
        inc = self.incarnation
        super().call_bookie(bookie_id, request, lambda r: self._alive(inc, lambda: on_reply(r))(),
                            lambda: self._alive(inc, on_timeout)(), timeout_s, label)

    def crash(self, why: str, restart_after_s: float | None) -> None:
        """Crash now; restart after `restart_after_s` (None: stays down)."""
        store, session = self.cluster.store, self.session
        self.incarnation += 1
        self.running = False
        self.world.note(f"{self.name} CRASHES ({why})")
        self.world.at(SESSION_TIMEOUT_S, lambda: store.expire(session), f"{self.name}'s session expires")
        if restart_after_s is not None:
            self.world.at(max(restart_after_s, 0.0), self._restart, f"{self.name} restarts")

    def _restart(self) -> None:
        self.running = True
        self.paused_until_s = 0.0
        self.session = self.cluster.store.new_session()
        self.world.note(f"{self.name} restarted (session {self.session})")
        self.on_restart()

    def renew_session_if_expired(self) -> None:
        """A process that finds its session expired (it was paused past the timeout) opens a new
        one, as a ZooKeeper client does after an expiry."""
        if not self.cluster.store.session_alive(self.session):
            self.session = self.cluster.store.new_session()
            self.world.stats["autorecovery_sessions_renewed"] += 1

    def start(self) -> None:
        raise NotImplementedError

    def on_restart(self) -> None:
        raise NotImplementedError
