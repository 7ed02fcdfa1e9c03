"""The data source's security options (pyspark_ledger/datasource/options/source_options.py): tls_ca, tls_cert,
tls_key and zk_auth reach the driver's and the executors' clients in the metadata settings
(pickled as the URI string), zk_auth and the password never show in a repr or a message, and
password_file reads the password from a file."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from pyspark_ledger.datasource.options.source_options import OptionError, parse_options

ZK_SECRET = "zk-s3cret-77"
BASE = {"metadataServiceUri": "zk://127.0.0.1:2181/ledgers", "log": "events"}


def test_security_options_travel_in_the_metadata_uri_and_print_redacted(tmp_path: Path) -> None:
    opts = parse_options({**BASE, "TLS_CA": "/etc/ca.pem", "tls_cert": "/etc/c.pem", "tls_key": "/etc/c.key",
                          "zk_auth": f"digest:spark:{ZK_SECRET}", "password": "ledger-pw"})
    shipped = pickle.loads(pickle.dumps(opts))  # what an executor gets
    for o in (opts, shipped):
        assert o.metadata.tls.as_params() == {"tls_ca": "/etc/ca.pem", "tls_cert": "/etc/c.pem", "tls_key": "/etc/c.key"}
        assert o.metadata.zk_auth is not None and o.metadata.zk_auth.as_pair() == ("digest", f"spark:{ZK_SECRET}")
        assert o.password == b"ledger-pw"
        shown = repr(o) + str(o.metadata) + f"{o.metadata}" + format(o.metadata, "") + o.metadata_uri
        assert ZK_SECRET not in shown and "ledger-pw" not in shown and "zk_auth=***" in shown


def test_password_file_and_its_errors(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_bytes(b"from-a-file\n")
    assert parse_options({**BASE, "password_file": str(f)}).password == b"from-a-file"
    with pytest.raises(OptionError) as both:
        parse_options({**BASE, "password_file": str(f), "password": "x"})
    assert both.value.option == "password_file"
    with pytest.raises(OptionError) as absent:
        parse_options({**BASE, "password_file": str(tmp_path / "nope")})
    assert absent.value.option == "password_file"
    with pytest.raises(OptionError) as bad:
        parse_options({**BASE, "zk_auth": f"plain:{ZK_SECRET}"})
    assert bad.value.option == "zk_auth" and ZK_SECRET not in str(bad.value)


def test_the_data_source_client_reaches_a_secured_cluster_with_its_options_alone(
        zk_server: object, zk_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_client (what the driver and every executor call) with tls_*, zk_auth and password_file
    options against mutual-TLS bookies on a ZooKeeper with ACLs, nothing in the environment."""
    from pyspark_ledger import LedgerClient
    from pyspark_ledger.datasource.clients import open_client
    from tests.security.secured_cluster import secured_cluster

    auth = f"digest:spark:{ZK_SECRET}"
    monkeypatch.setenv("LEDGER_ZK_AUTH", auth)  # the bookies' (inherited at start)
    cluster, certs, _ = secured_cluster(tmp_path, 1, metadata_uri=zk_uri)
    with cluster:
        monkeypatch.delenv("LEDGER_ZK_AUTH")
        with LedgerClient(zk_uri, zk_auth=auth, **cluster.client_tls) as writer:
            w = writer.create_ledger(1, 1, 1, password="spark-ledger-pw")
            for i in range(5):
                w.add_entry(b"row %d" % i)
            w.close()
        pw = tmp_path / "ledger.pw"
        pw.write_text("spark-ledger-pw\n")
        opts = parse_options({"metadataServiceUri": zk_uri, "ledger": str(w.ledger_id.id), "zk_auth": auth,
                              "password_file": str(pw), **cluster.client_tls})
        with open_client(pickle.loads(pickle.dumps(opts))) as client:
            got = client.open_ledger(w.ledger_id, password=opts.password).read_entries(0, 4)
            assert [e.payload for e in got] == [b"row %d" % i for i in range(5)]
