"""A log's writer: take the ephemeral writer lock, recover the log's last ledger if it is not
closed, open a new ledger, write it, close it; on a writer error, try again (bounded).

A process whose session expired has lost the lock: it stops. A paused process (a zombie) does
not notice until it runs again; by then another writer may have fenced and closed its ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import cast

from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.metastore import CLOSED, BadVersion, LedgerMeta, LogRecord
from pyspark_ledger.testing.sim.recoverer import SimRecovery
from pyspark_ledger.testing.sim.writer import SimWriter


class SimLogWriter(Actor):
    def __init__(self, cluster: Cluster, name: str, *, ledgers_total: int, entries_per_ledger: int,
                 quorum: tuple[int, int, int], attempts_max: int, retry_s: float, give_up_at_s: float,
                 on_end: Callable[[SimLogWriter, str | None], None]):
        super().__init__(cluster, name)
        self.session = cluster.store.new_session()
        self.ledgers_total, self.entries_per_ledger = ledgers_total, entries_per_ledger
        self.ensemble_size, self.w, self.a = quorum
        self.attempts_left = attempts_max
        self.retry_s = retry_s
        self.give_up_at_s = give_up_at_s  # no new attempt after this (simulated) time
        self.written = 0
        self.writer: SimWriter | None = None
        self.recoveries = 0
        self.ended = False
        self.on_end = on_end

    def start(self) -> None:
        self.later(0.0, self._attempt, "start")

    def pause(self, until_s: float) -> None:
        self.paused_until_s = until_s
        if self.writer is not None:
            self.writer.paused_until_s = until_s

    def _end(self, error: str | None) -> None:
        if not self.ended:
            self.ended = True
            self.world.note(f"{self.name} ends: {error or 'done'}")
            self.on_end(self, error)

    def _retry(self, why: str) -> None:
        self.attempts_left -= 1
        if self.attempts_left <= 0 or self.world.now_s >= self.give_up_at_s:
            self._end(f"gave up: {why}")
        else:
            self.later(self.retry_s, self._attempt, f"retry ({why})")

    def _attempt(self) -> None:
        """Take (or keep) the lock, then recover the last ledger and open a new one."""
        store = self.cluster.store

        def op() -> object:
            if not store.session_alive(self.session):
                return "session expired"
            record, version = store.log
            if record.owner_session not in (None, self.session):
                return "lock held by another writer"
            new = replace(record, owner_session=self.session)
            store.log_cas(new, version)
            return new

        def then(result: object) -> None:
            if result == "session expired":
                self._end("session expired: the log's lock is lost")
            elif isinstance(result, (str, BadVersion)):
                self._retry(str(result))
            else:
                self._recover_last(cast(LogRecord, result))  # neither an error nor a conflict: the record

        self.meta_call(op, then, "lock")

    def _recover_last(self, record: LogRecord) -> None:
        if not record.ledgers:
            self._open_new()
            return
        last = record.ledgers[-1]
        meta, _ = self.cluster.store.read(last)
        if meta.state == CLOSED:
            self._open_new()
            return
        self.recoveries += 1

        def ended(rec: SimRecovery, error: str | None) -> None:
            if error is None:
                self._open_new()
            else:
                self._retry(error)

        rec = SimRecovery(self.cluster, f"{self.name}.rec{self.recoveries}", last, ended)
        rec.paused_until_s = self.paused_until_s
        rec.start()

    def _open_new(self) -> None:
        store, rng = self.cluster.store, self.world.rng
        writable = self.cluster.writable_bookies()
        if len(writable) < self.ensemble_size:
            self._retry(f"only {len(writable)} writable bookies for an ensemble of {self.ensemble_size}")
            return
        if self.cluster.placement is not None:
            ensemble = self.cluster.placement.new_ensemble(self.ensemble_size, self.w, writable)
        else:
            ensemble = tuple(rng.sample(writable, self.ensemble_size))

        def op() -> object:
            record, version = store.log
            if not store.session_alive(self.session) or record.owner_session != self.session:
                return "the log's lock is lost"
            meta = store.create_ledger(ensemble, self.w, self.a)
            store.log_cas(replace(record, ledgers=record.ledgers + (meta.ledger,)), version)
            return meta

        def then(result: object) -> None:
            if isinstance(result, (str, BadVersion)):
                self._retry(str(result))
                return
            meta = cast(LedgerMeta, result)  # neither an error nor a conflict: the new ledger
            writer = SimWriter(self.cluster, f"{self.name}.w{meta.ledger}", meta, 0,
                               self.entries_per_ledger, self._writer_ended)
            writer.paused_until_s = self.paused_until_s
            self.writer = writer
            self.cluster.writers.append(writer)
            writer.start()

        self.meta_call(op, then, "open ledger")

    def _writer_ended(self, writer: SimWriter, error: str | None) -> None:
        if error is not None:
            self._retry(error)
            return
        self.written += 1
        if self.written < self.ledgers_total:
            self._open_new()
        else:
            self._release()

    def _release(self) -> None:
        store = self.cluster.store

        def op() -> None:
            record, version = store.log
            if record.owner_session == self.session:
                store.log_cas(replace(record, owner_session=None), version)

        self.meta_call(op, lambda _: self._end(None), "release lock")

    def session_expired(self) -> None:
        """The store told this process its session expired: its writer stops at once."""
        if self.writer is not None:
            self.writer.stop_for("session expired")
