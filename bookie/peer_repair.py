"""Peer repair on the bookie: a stored copy the scrubber found damaged is replaced by a good copy
read from another bookie of the entry's write set (TigerBeetle repairs a replica's faulty blocks
from its peers the same way).

For each damaged entry: the ledger's metadata names the fragment and its write set; if this
bookie is not in it (a leftover copy after a re-replication), nothing is done. Otherwise the
entry is read from each peer of the write set in turn, with the ledger's master key (so peers
that run with --require-read-auth answer; a peer verifies its own copy's crc32c before it
answers OK) and written back here as a recovery add with the key this bookie already
holds for the ledger: the same bytes the writer sent, journaled and indexed like any add (the
index then points at the new copy; the damaged one becomes dead bytes for compaction).
Unknown stays unknown: a ledger metadata cannot say anything about is left alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

import grpc

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from bookie.storage.engine_types import LedgerKey
from metadata import LedgerId, write_set
from metadata.ledgers import LedgerManager
from metadata.offload_record import is_offloaded
from metadata.registry import BookieRegistry
from metadata.store import MetadataStore

log = logging.getLogger(__name__)

PEER_READ_TIMEOUT_S = 10.0
LOCAL_ADD_TIMEOUT_S = 30.0
LAC_NONE = -1  # a repaired copy raises no LAC: the original add already did
# At most this many damaged entries of one window are repaired at once (bounds the work per call).
REPAIR_BATCH_ENTRIES_MAX = 1024

ChannelFactory = Callable[[str], grpc.Channel]


class RepairStorage(Protocol):
    def stored_master_key(self, ledger: LedgerKey) -> bytes | None: ...
    def add_batch(self, ledger: LedgerKey, master_key: bytes, entries: list[tuple[int, int, bytes]],
                  recovery: bool, on_done: Callable[[Status], None], allow_inline: bool = True) -> None: ...


def insecure_channels(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address)


def tls_channels(ca: bytes | None, cert: bytes | None, key: bytes | None) -> ChannelFactory:
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    return lambda address: grpc.secure_channel(address, creds)


class PeerRepair:
    def __init__(self, storage: RepairStorage, store: MetadataStore, bookie_id: str,
                 channels: ChannelFactory = insecure_channels) -> None:
        self._storage = storage
        self._ledgers = LedgerManager(store)
        self._registry = BookieRegistry(store)
        self._self_id = bookie_id
        self._channels = channels

    def __call__(self, ledger: LedgerKey, entry_ids: list[int]) -> int:
        """Repair what can be repaired of `entry_ids`; returns how many copies were rewritten."""
        got = self._ledgers.get(LedgerId(*ledger))
        if got is None:
            log.info("peer repair skipped: ledger %s has no metadata (GC will delete it)", ledger)
            return 0
        meta, _ = got
        if is_offloaded(meta):
            log.info("peer repair skipped: ledger %s is offloaded (readers use the object store)", ledger)
            return 0
        key = self._storage.stored_master_key(ledger)
        if key is None:
            log.warning("peer repair skipped: no master key stored for ledger %s", ledger)
            return 0
        repaired = 0
        for entry_id in entry_ids[:REPAIR_BATCH_ENTRIES_MAX]:
            if meta.is_closed and entry_id > meta.last_entry_id:  # type: ignore[operator]  # closed: it has an end
                continue  # a dirty tail: never served, compaction drops it
            ensemble = meta.ensemble_for(entry_id)
            holders = [ensemble[i] for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size)]
            if self._self_id not in holders:
                continue  # not ours any more (re-replicated elsewhere): nothing to repair here
            data = self._read_from_peers(ledger, key, entry_id, [b for b in holders if b != self._self_id])
            if data is not None and self._write_back(ledger, key, entry_id, data):
                repaired += 1
        log.info("peer repair ledger=%s damaged=%d repaired=%d", ledger, len(entry_ids), repaired)
        return repaired

    def _read_from_peers(self, ledger: LedgerKey, key: bytes, entry_id: int, peers: list[str]) -> bytes | None:
        """The first good copy a peer serves. The read carries the ledger's master key (the one this
        bookie keeps, the one the peers keep too), so a peer with --require-read-auth serves it; over
        mutual TLS this bookie's certificate also goes along, an operator identity if listed."""
        for peer in peers:
            info = self._registry.get(peer)
            if info is None:
                continue  # not registered now: down, or gone
            try:
                with self._channels(info.address) as channel:
                    resp = pb_grpc.BookieStub(channel).Read(pb.ReadRequest(
                        ledger=pb.LedgerRef(scope_id=ledger[0], ledger_id=ledger[1]),
                        first_entry_id=entry_id, last_entry_id=entry_id, max_entries=1, master_key=key),
                        timeout=PEER_READ_TIMEOUT_S)
            except grpc.RpcError as exc:
                log.info("peer repair: %s did not answer for %s entry %d: %s", peer, ledger, entry_id, exc.code())
                continue
            if (resp.status == Status.OK and list(resp.entry_ids[:1]) == [entry_id]
                    and resp.entry_status[0] == Status.OK):
                return bytes(resp.entries[0])
        log.warning("peer repair: no good copy of ledger %s entry %d on %s", ledger, entry_id, peers)
        return None

    def _write_back(self, ledger: LedgerKey, key: bytes, entry_id: int, data: bytes) -> bool:
        done = threading.Event()
        result: list[Status] = []

        def on_done(status: Status) -> None:
            result.append(status)
            done.set()

        self._storage.add_batch(ledger, key, [(entry_id, LAC_NONE, data)], True, on_done)
        if not done.wait(LOCAL_ADD_TIMEOUT_S) or result[0] != Status.OK:
            log.warning("peer repair: writing the good copy failed ledger=%s entry=%d status=%s",
                        ledger, entry_id, result[0].name if result else "TIMEOUT")
            return False
        return True
