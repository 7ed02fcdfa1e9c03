"""The elected auditor: one per cluster, chosen through the metadata store.

Election: whoever creates the ephemeral node /autorecovery/auditor leads (metadata.ephemeral_lock;
on ZooKeeper an ephemeral node of the leader's session, on the embedded store a heartbeat lease).
The others try again every ELECTION_RETRY_S; when the leader dies its node goes with its session
(or lease) and one of them takes over. The leader checks that it still holds the node before
every tick and every CURSOR_EVERY_LEDGERS ledgers of a scan, and stops leading at once when not.

While leading, every tick: list registrations and cookies (only after a registration watch fired,
or every RELIST_S), update the bookies' states (bookie_states), and when a bookie has been down
longer than the grace period and no scan has covered its loss yet, scan (audit_scan). Once racks
are registered, a placement scan (placement_scan) marks misplaced closed ledgers: when a rack
gains its first writable bookie (a rack came back: what could not be spread before can be now),
when the placement rule in the cluster settings changes, and every placement_scan_interval_s.
With a retention task (retention_task), the leader also applies every log's retention on its schedule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from metadata import BookieRegistry, MetadataError
from metadata.cluster_settings import ClusterSettingsWatch
from metadata.context import now_ms
from metadata.ephemeral_lock import EphemeralLock, try_lock
from metadata.errors import BadVersionError, NodeExistsError, NoNodeError
from metadata.paths import AUDITED_BOOKIES, AUDITOR_ELECTION, BOOKIE_COOKIES, UNDERREPLICATED, audited_bookie_path
from metadata.store import MetadataStore
from pyspark_ledger.autorecovery.audit_scan import AuditScan, ScanCursor, audited_by, choose_scan, read_cursor
from pyspark_ledger.autorecovery.bookie_states import DOWN, BookieState, forget_audits, lost, observe, with_audited
from pyspark_ledger.autorecovery.counting_store import CountingStore
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.autorecovery.placement_scan import PlacementScan, RackView
from pyspark_ledger.autorecovery.retention_task import RetentionTask
from pyspark_ledger.protocol.placement import RackRules, rack_name

log = logging.getLogger(__name__)

ELECTION_RETRY_S = 1.0
TICK_S = 0.5
RELIST_S = 10.0  # registrations are listed at least this often even without a watch event
METADATA_ERROR_PAUSE_S = 1.0


def load_states(store: MetadataStore) -> dict[str, BookieState]:
    out = {}
    for name in store.children(AUDITED_BOOKIES):
        got = store.get(audited_bookie_path(name))
        state = None if got is None else BookieState.from_bytes(got.value)
        if state is not None:
            out[name] = state
    return out


def save_state(store: MetadataStore, state: BookieState | None, bookie_id: str) -> None:
    path = audited_bookie_path(bookie_id)
    got = store.get(path)
    try:
        if state is None:
            if got is not None:
                store.delete(path, got.version)
        elif got is None:
            store.create(path, state.to_bytes())
        elif got.value != state.to_bytes():
            store.compare_and_set(path, state.to_bytes(), got.version)
    except (BadVersionError, NodeExistsError, NoNodeError):
        log.warning("a bookie's audited state changed under the auditor (another auditor?) bookie=%s", bookie_id)


class ElectedAuditor:
    def __init__(self, store: MetadataStore, holder: str, *, lost_bookie_grace_s: float, scan_rate_per_s: float,
                 metrics: AutorecoveryMetrics, stop: threading.Event, placement_scan_interval_s: float = 3600.0,
                 retention: RetentionTask | None = None):
        self.store = store
        self.holder = holder
        self.grace_ms = int(lost_bookie_grace_s * 1000)
        self.metrics = metrics
        self._stop = stop
        self._relist = threading.Event()
        self._registrations_changed = threading.Event()  # set by the watch: a lost bookie may have come and gone
        counting = CountingStore(store, metrics.metadata_requests.inc)
        self.scan = AuditScan(counting, holder, scan_rate_per_s, on_ledger=metrics.scanned_ledgers.inc,
                              on_mark=metrics.marked_ledgers.inc)
        self.placement = PlacementScan(counting, holder, scan_rate_per_s, on_ledger=metrics.scanned_ledgers.inc,
                                       on_mark=metrics.marked_ledgers.inc)
        self.placement_scan_interval_s = placement_scan_interval_s
        self._settings: ClusterSettingsWatch | None = None
        self._view: RackView | None = None  # racks as the last registry listing showed them
        # What the last placement decision saw: writable racks, the rule, when it last scanned.
        self._placement_seen: tuple[frozenset[str], RackRules] | None = None
        self._placement_scanned_at = time.monotonic()
        self.retention = retention  # logs' retention, applied on its schedule while leading
        self.leading = False

    def run(self) -> None:
        """The auditor thread: stand for election until stopped; lead while elected."""
        watch = BookieRegistry(self.store).watch(lambda _ids: self._on_registrations_changed())
        self._settings = ClusterSettingsWatch(self.store)
        try:
            while not self._stop.is_set():
                try:
                    lock = try_lock(self.store, AUDITOR_ELECTION, self.holder)
                except MetadataError as exc:
                    log.warning("auditor election failed, trying again error=%s", exc)
                    lock = None
                if lock is None:
                    self._stop.wait(ELECTION_RETRY_S)
                    continue
                self._lead_until_lost(lock)
        finally:
            watch.cancel()
            self._settings.close()

    def _on_registrations_changed(self) -> None:
        self._registrations_changed.set()
        self._relist.set()

    def _lead_until_lost(self, lock: EphemeralLock) -> None:
        log.info("elected autorecovery auditor holder=%s", self.holder)
        self.leading = True
        self.metrics.auditor_leader.set(1)
        try:
            self._lead(lock.held)
        except MetadataError as exc:
            log.warning("auditor stopped leading on a metadata error error=%s", exc)
            self._stop.wait(METADATA_ERROR_PAUSE_S)
        finally:
            self.leading = False
            self.metrics.auditor_leader.set(0)
            lock.release()
            log.info("autorecovery auditor stepped down holder=%s", self.holder)

    def _lead(self, still_leader: Callable[[], bool]) -> None:
        # The predecessor's down-since is kept, its "audited" is not (bookie_states.forget_audits).
        states = forget_audits(load_states(self.store))
        # A predecessor's unfinished scan, read once: from here on only this auditor scans.
        left_over = read_cursor(self.scan.store)
        self._relist.set()
        listed_at = 0.0
        while not self._stop.is_set() and still_leader():
            if self._relist.is_set() or time.monotonic() - listed_at > RELIST_S:
                self._relist.clear()
                listed_at = time.monotonic()
                changed = self._registrations_changed.is_set()
                self._registrations_changed.clear()
                states = self._observe(states)
                if changed:
                    states = forget_audits(states)
                self.metrics.underreplicated_ledgers.set(len(self.store.children(UNDERREPLICATED)))
            now = now_ms()
            lost_now = lost(states, now, self.grace_ms)
            self.metrics.lost_bookies.set(len(lost_now))
            if lost_now:
                states = self._scan_for_losses(states, lost_now, still_leader, left_over)
                left_over = None
            self._maybe_check_placement(still_leader)
            self._maybe_apply_retention(still_leader)
            self._stop.wait(TICK_S)

    def _observe(self, previous: dict[str, BookieState]) -> dict[str, BookieState]:
        infos = BookieRegistry(self.store).list()
        self._view = RackView.of(infos)
        registered = {b.bookie_id: b.read_only for b in infos}
        cookies = set(self.store.children(BOOKIE_COOKIES))
        states = observe(previous, registered, cookies, now_ms())
        for bookie_id in set(previous) | set(states):
            new = states.get(bookie_id)
            if new != previous.get(bookie_id):
                if new is not None:  # up and read-only are routine; a bookie gone is for an operator
                    log.log(logging.WARNING if new.state == DOWN else logging.INFO, "bookie state bookie=%s state=%s",
                            bookie_id, new.state)
                save_state(self.store, new, bookie_id)
        return states

    def _scan_for_losses(self, states: dict[str, BookieState], lost_now: set[str],
                         still_leader: Callable[[], bool], cursor: ScanCursor | None) -> dict[str, BookieState]:
        """Resume a scan a predecessor left (for the bookies still lost), else scan for the lost
        bookies no scan has covered yet (audit_scan.choose_scan). Returns the states, with the
        losses a finished scan from the start covered noted (a resumed one notes none)."""
        choice = choose_scan(cursor, lost_now, {b for b in lost_now if states[b].audited})
        if choice is None:
            return states
        if choice.resumed:
            log.info("resuming the audit scan lost=%s after=%s (a scan from the start follows)",
                     ",".join(choice.cursor.bookies), choice.cursor.after)
        else:
            log.info("audit scan started lost=%s", ",".join(choice.cursor.bookies))
        checks = [0]

        def keep_going() -> bool:
            checks[0] += 1
            return not self._stop.is_set() and (checks[0] % 100 != 0 or still_leader())

        if not self.scan.run(choice.cursor, keep_going):
            return states
        out = dict(states)
        for b in audited_by(choice):
            if b in out and b in lost_now:
                out[b] = with_audited(out[b])
                save_state(self.store, out[b], b)
        return out

    def _maybe_apply_retention(self, still_leader: Callable[[], bool]) -> None:
        if self.retention is None or not self.retention.due():
            return
        checks = [0]

        def keep_going() -> bool:
            checks[0] += 1
            return not self._stop.is_set() and (checks[0] % 10 != 0 or still_leader())

        self.retention.run_pass(keep_going)

    def _maybe_check_placement(self, still_leader: Callable[[], bool]) -> None:
        """Scan for misplaced ledgers when a rack came back, the rule changed, or the interval passed."""
        view = self._view
        if view is None or not view.uses_racks or self._settings is None:
            return
        current = self._settings.current
        rules = RackRules(current.min_racks_per_write_quorum, current.enforce_min_racks)
        seen, self._placement_seen = self._placement_seen, (view.writable_racks, rules)
        due = time.monotonic() - self._placement_scanned_at >= self.placement_scan_interval_s
        if seen is None:
            log.info("placement watched writable_racks=%s", ",".join(sorted(rack_name(r) for r in view.writable_racks)))
        else:
            came_back, gone = view.writable_racks - seen[0], seen[0] - view.writable_racks
            if gone:
                log.info("racks without a writable bookie racks=%s", ",".join(sorted(rack_name(r) for r in gone)))
            if came_back:
                log.info("racks writable again, scanning placement racks=%s", ",".join(sorted(came_back)))
            due = due or bool(came_back) or rules != seen[1]
        if not due:
            return
        self._placement_scanned_at = time.monotonic()
        checks = [0]

        def keep_going() -> bool:
            checks[0] += 1
            return not self._stop.is_set() and (checks[0] % 100 != 0 or still_leader())

        self.placement.run(view, rules, keep_going)
