"""The checks tests/deploy/doc_zookeeper.py makes of docs/deployment.md and examples/zookeeper/
refuse what they exist to refuse (planted here, in copies, never in the shipped files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.doc_zookeeper import DOC, EXAMPLES, doc_start_command, substitute


def test_only_the_values_marked_change_may_be_replaced() -> None:
    assert "dataDir=/elsewhere" in substitute(EXAMPLES / "zoo-ensemble.cfg", {"dataDir": "/elsewhere"})
    with pytest.raises(AssertionError, match="tickTime"):
        substitute(EXAMPLES / "zoo-ensemble.cfg", {"dataDir": "/elsewhere", "tickTime": "500"})
    with pytest.raises(AssertionError, match="initLimit"):
        substitute(EXAMPLES / "zoo-ensemble.cfg", {"initLimit": "2"})


def test_the_doc_gives_one_start_command_for_its_files(tmp_path: Path) -> None:
    assert doc_start_command()[-2:] == ["org.apache.zookeeper.server.quorum.QuorumPeerMain", "/etc/zookeeper/zoo.cfg"]
    text = DOC.read_text()
    java = next(line for line in text.splitlines() if line.startswith("java ") and "QuorumPeerMain" in line)
    two_commands = tmp_path / "two.md"
    two_commands.write_text(text.replace(java, java + "\n" + java.replace("-Xmx512m", "-Xmx1g"), 1))
    with pytest.raises(AssertionError, match="one ZooKeeper start command"):
        doc_start_command(two_commands)
    no_install = tmp_path / "no_install.md"
    no_install.write_text(text.replace("cp examples/zookeeper/zoo-ensemble.cfg", "cp my.cfg"))
    with pytest.raises(AssertionError, match="zoo-ensemble.cfg"):
        doc_start_command(no_install)
