"""Cluster settings (issue 29 item 2) on both stores: defaults, checked values, unknown keys kept
across a read-modify-write, a compare-and-set that never loses a concurrent change, clients
seeing a change through their watch, and `ledger cluster get|set`."""

from __future__ import annotations

import json
import threading
import time

import pytest

from metadata import InvalidMetadataError, MetadataStore
from metadata.cluster_settings import (
    SETTINGS,
    ClusterSettings,
    read_cluster_settings,
    update_cluster_settings,
)
from metadata.paths import CLUSTER_SETTINGS
from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient

WAIT_S = 60.0


def test_defaults_when_never_set(store: MetadataStore) -> None:
    settings, version = read_cluster_settings(store)
    assert version is None
    assert settings.min_racks_per_write_quorum == 2
    assert settings.enforce_min_racks is False
    assert dict(settings.values) == {name: spec.default for name, spec in SETTINGS.items()}


def test_set_checks_values_and_names_the_key(store: MetadataStore) -> None:
    with pytest.raises(InvalidMetadataError, match="min_racks_per_write_quorum"):
        update_cluster_settings(store, {"min_racks_per_write_quorum": 0})
    with pytest.raises(InvalidMetadataError, match="enforce_min_racks.*true or false"):
        update_cluster_settings(store, {"enforce_min_racks": 1})
    with pytest.raises(InvalidMetadataError, match="unknown cluster setting 'min_rack'"):
        update_cluster_settings(store, {"min_rack": 3})
    assert read_cluster_settings(store)[1] is None  # nothing was written


def test_unknown_keys_survive_a_read_modify_write(store: MetadataStore) -> None:
    # A newer release stored a key this one does not know, and a value of a type it cannot use.
    store.create(CLUSTER_SETTINGS, json.dumps({"format_version": 7, "enforce_min_racks": "maybe"}).encode())
    settings, _ = read_cluster_settings(store)
    assert settings.enforce_min_racks is False and "enforce_min_racks" in settings.problems[0]
    update_cluster_settings(store, {"min_racks_per_write_quorum": 3})
    raw = json.loads(store.read(CLUSTER_SETTINGS).value)
    assert raw == {"format_version": 7, "enforce_min_racks": "maybe", "min_racks_per_write_quorum": 3}
    update_cluster_settings(store, {"enforce_min_racks": True, "min_racks_per_write_quorum": None})  # None: default
    assert json.loads(store.read(CLUSTER_SETTINGS).value) == {"format_version": 7, "enforce_min_racks": True}


def test_concurrent_updates_of_different_keys_both_land(store: MetadataStore) -> None:
    rounds = 20
    errors: list[BaseException] = []

    def writer(key: str, values: list[object]) -> None:
        try:
            for v in values:
                update_cluster_settings(store, {key: v})
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    a = threading.Thread(target=writer, args=("min_racks_per_write_quorum", list(range(1, rounds + 1))))
    b = threading.Thread(target=writer, args=("enforce_min_racks", [i % 2 == 0 for i in range(rounds)]))
    a.start(), b.start()
    a.join(120), b.join(120)
    assert not errors
    settings, version = read_cluster_settings(store)
    assert (settings.min_racks_per_write_quorum, settings.enforce_min_racks) == (rounds, False)
    assert version is not None and version >= 1


def test_clients_read_at_start_and_on_change(store_uri: str) -> None:
    with LedgerClient(store_uri) as first:
        assert first.cluster_settings.enforce_min_racks is False
        with LedgerClient(store_uri) as second:
            update_cluster_settings(second.store, {"enforce_min_racks": True, "min_racks_per_write_quorum": 3})
            deadline = time.monotonic() + WAIT_S
            while not first.cluster_settings.enforce_min_racks and time.monotonic() < deadline:
                time.sleep(0.05)
            assert first.cluster_settings.enforce_min_racks is True
            assert first.cluster_settings.min_racks_per_write_quorum == 3
        with LedgerClient(store_uri) as third:  # a client started later reads them at start
            assert third.cluster_settings.min_racks_per_write_quorum == 3


def test_shell_get_and_set(capsys: pytest.CaptureFixture[str], store_uri: str) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--metadata-uri", store_uri, *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("cluster", "get", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["version"] is None and {r["key"]: r["value"] for r in got["settings"]} == {
        "min_racks_per_write_quorum": 2, "enforce_min_racks": False, "storage_format_version": 1,
        "salted_password_digests": False, "message_batches": True,
        "ledger_key_verifiers": True, "offload_store": ""}
    code, out, _ = run("cluster", "set", "min_racks_per_write_quorum=3", "enforce_min_racks=true")
    assert code == 0 and "min_racks_per_write_quorum  3      set" in out
    code, out, _ = run("cluster", "get", "enforce_min_racks")
    assert code == 0 and "enforce_min_racks  true   set" in out and "min_racks_per" not in out
    code, _, err = run("cluster", "set", "min_racks_per_write_quorum=two")
    assert code == 1 and "min_racks_per_write_quorum: 'two' is not an integer" in err
    code, _, err = run("cluster", "set", "racks=2")
    assert code == 1 and "unknown cluster setting 'racks'" in err
    code, _, err = run("cluster", "set", "enforce_min_racks")
    assert code == 1 and "is not KEY=VALUE" in err
    code, out, _ = run("cluster", "set", "min_racks_per_write_quorum=default")
    assert code == 0 and "min_racks_per_write_quorum  2      default" in out
    code, out, _ = run("cluster", "get", "--json")
    assert json.loads(out)["version"] == 1  # created by the first set, changed by the reset


def test_a_setting_is_one_line() -> None:
    # Every known setting has a default its own check accepts, and help text for `cluster get`.
    for name, spec in SETTINGS.items():
        assert spec.check(spec.default) == spec.default and spec.help, name
    assert ClusterSettings.from_raw({}).values.keys() == SETTINGS.keys()
