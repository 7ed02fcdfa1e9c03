"""Every metrics endpoint parses with prometheus_client's own parser (and promtool's, where the
binary is installed), and every metric the Grafana dashboard (docs/grafana/pyspark-ledger.json)
queries exists: a real bookie process, an autorecovery service and a client that added, read
and recovered, scraped once."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bookie.status import Status
from pyspark_ledger.autorecovery.service import AutorecoveryService, AutorecoverySettings
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import add_sync

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "docs" / "grafana" / "pyspark-ledger.json"
# The project's metric names start with these; anything else in a query is PromQL or a label.
METRIC_NAME = re.compile(r"\b(?:bookie|autorecovery|ledger_client)_[a-z0-9_]+\b")
ADDS, ENTRY = 40, b"m" * 1024


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def sample_values(page: str) -> dict[str, float]:
    """Sample name (with its _total/_bucket/_count/_sum suffix) -> the sum over its label sets."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def dashboard_metric_names() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    # Label matchers ({instance=~"$instance"}) hold no metric names.
    return {name for e in exprs for name in METRIC_NAME.findall(re.sub(r"\{[^}]*\}", "", e))}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The page of each endpoint after some work: bookie, autorecovery, client."""
    work = tmp_path_factory.mktemp("metrics-endpoints")
    cluster = LocalCluster(0, work_dir=work)
    metrics_port = free_port()
    bookie = cluster.add_bookie(extra_args=["--metrics-port", str(metrics_port)])
    registry = CollectorRegistry()
    client = LedgerClient(cluster.metadata_uri, metrics_registry=registry)
    autorecovery_client = LedgerClient(cluster.metadata_uri)
    autorecovery = AutorecoveryService(autorecovery_client.context, AutorecoverySettings(workers=1, lost_bookie_grace_s=60))
    try:
        autorecovery_port = autorecovery.metrics.serve(0)
        autorecovery.start()
        _work(client, bookie.bookie_id, bookie.address)
        yield {"bookie": scrape(metrics_port), "autorecovery": scrape(autorecovery_port),
               "client": generate_latest(registry).decode()}
    finally:
        autorecovery.stop()
        autorecovery_client.close()
        client.close()
        cluster.close()


def _work(client: LedgerClient, bookie_id: str, address: str) -> None:
    """Adds, reads, one recovery and one refused add (the refusals counter shows an op only once
    one was refused)."""
    w = client.create_ledger(1, 1, 1, password=b"pw")
    for _ in range(ADDS):
        w.add_entry(ENTRY)
    w.close()
    ledger_id = w.ledger_id
    with client.open_ledger(ledger_id, password=b"pw") as r:
        assert len(list(r.read_entries(0, ADDS - 1))) == ADDS
    left_open = client.create_ledger(1, 1, 1, password=b"pw")
    left_open.add_entry(ENTRY)
    client.open_ledger(left_open.ledger_id, recovery=True, password=b"pw").close()
    with BookieClient(bookie_id, address) as bc:
        status, _ = add_sync(bc, (ledger_id.scope_id, ledger_id.id), [(ADDS, ADDS - 1, b"x")], key=b"not-the-key")
        assert status == Status.UNAUTHORIZED


def test_every_endpoint_parses_with_the_library_parser(pages: dict[str, str]) -> None:
    for name, page in pages.items():
        families = list(text_string_to_metric_families(page))
        assert families, f"{name}: an empty page"
        promtool = shutil.which("promtool")
        if promtool is not None:
            out = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, f"{name}: {out.stdout}{out.stderr}"


def test_every_metric_the_dashboard_queries_is_exported(pages: dict[str, str]) -> None:
    names = dashboard_metric_names()
    assert len(names) > 30, names  # the extraction found the queries
    exported = {n for page in pages.values() for n in sample_values(page)}
    missing = sorted(names - exported)
    assert not missing, f"the dashboard queries metrics no endpoint exports: {missing}"


def test_the_metrics_count_what_was_done(pages: dict[str, str]) -> None:
    bookie, client = sample_values(pages["bookie"]), sample_values(pages["client"])
    assert bookie["bookie_adds_total"] >= ADDS + 1  # and what the recovery wrote back
    assert bookie["bookie_add_bytes_total"] >= (ADDS + 1) * len(ENTRY)
    assert bookie["bookie_add_latency_seconds_count"] >= 1
    assert bookie["bookie_read_entries_total"] >= ADDS
    assert bookie["bookie_journal_fsync_latency_seconds_count"] == bookie["bookie_journal_fsyncs_total"] >= 1
    assert bookie["bookie_auth_refusals_total"] == 1
    assert bookie["bookie_directory_capacity_bytes"] > 0
    assert client["ledger_client_adds_total"] == ADDS + 1
    assert client["ledger_client_add_bytes_total"] == (ADDS + 1) * len(ENTRY)
    assert 1 <= client["ledger_client_add_latency_seconds_count"] <= ADDS + 1
    assert client["ledger_client_read_entries_total"] >= ADDS
    assert client["ledger_client_recoveries_total"] == 1
    assert client["ledger_client_ensemble_changes_total"] == 0


def test_client_metrics_are_registered_nowhere_by_default() -> None:
    from prometheus_client import REGISTRY

    from pyspark_ledger.client_metrics import ClientMetrics

    metrics = ClientMetrics()
    assert "ledger_client_adds_total" not in generate_latest(REGISTRY).decode()
    registry = CollectorRegistry()
    metrics.register(registry)
    with pytest.raises(ValueError):
        ClientMetrics().register(registry)  # a second client's names would collide


def test_an_ensemble_change_is_counted(tmp_path: Path) -> None:
    with LocalCluster(2, work_dir=tmp_path) as cluster:
        client = LedgerClient(cluster.metadata_uri, add_timeout_s=5.0)
        try:
            w = client.create_ledger(1, 1, 1)
            w.add_entry(ENTRY)
            [first] = w.metadata.segments[-1].bookies
            next(b for b in cluster.bookies if b.bookie_id == first).kill()
            w.add_entry(ENTRY)  # goes to the other bookie after an ensemble change
            w.close()
            values = sample_values(generate_latest(client.metrics).decode())
            assert values["ledger_client_ensemble_changes_total"] == 1
            assert values["ledger_client_adds_total"] == 2 and values["ledger_client_add_failures_total"] == 0
        finally:
            client.close()
