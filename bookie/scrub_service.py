"""Wires a bookie's scrubber (bookie/scrubber.py) to peer repair over the metadata store and the
bookie's own TLS settings, and exposes its counters as metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bookie.config import BookieConfig
from bookie.metrics import Metrics, Samples
from bookie.peer_repair import ChannelFactory, PeerRepair, insecure_channels, tls_channels
from bookie.scrubber import Scrubber, ScrubSettings
from bookie.storage import BookieStorage
from metadata.store import MetadataStore

COUNTERS = {
    "bookie_scrubbed_bytes_total": ("scrubbed_bytes_total", "bytes of stored entries verified by the scrubber"),
    "bookie_scrub_damaged_total": ("scrub_damaged_total", "damaged or unreadable stored copies the scrubber found"),
    "bookie_scrub_repaired_total": ("scrub_repaired_total", "damaged copies rewritten from a peer's good copy"),
    "bookie_scrub_passes_total": ("scrub_passes_total", "completed scrub passes"),
}


def start_scrubber(storage: BookieStorage, store: MetadataStore, cfg: BookieConfig, bookie_id: str,
                   metrics: Metrics) -> Scrubber:
    channels: ChannelFactory = insecure_channels
    if cfg.tls_cert and cfg.tls_key:
        # Peers speak TLS too; this bookie's own certificate is its client identity (mutual TLS).
        ca = Path(cfg.tls_ca).read_bytes() if cfg.tls_ca else None
        channels = tls_channels(ca, Path(cfg.tls_cert).read_bytes(), Path(cfg.tls_key).read_bytes())
    repair = PeerRepair(storage, store, bookie_id, channels)
    scrubber = Scrubber(storage, repair, ScrubSettings(cfg.scrub_interval_s, cfg.scrub_rate_mb_s * 2**20))
    for name, (key, help_text) in COUNTERS.items():
        metrics.family(name, "counter", help_text, _stat_reader(scrubber, key))
    scrubber.start()
    return scrubber


def _stat_reader(scrubber: Scrubber, key: str) -> Callable[[], Samples]:
    """Reads one of the scrubber's counters when scraped."""
    return lambda: [({}, float(scrubber.stats()[key]))]
