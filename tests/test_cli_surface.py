"""Every flag of `bookie` and `ledger` (every subcommand) has help text, and both print their
version (issue 23)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from bookie.config import build_parser as bookie_parser
from bookie.proto.versions import RELEASE
from pyspark_ledger.cli.app import build_parser as ledger_parser


def flags_without_help(parser: argparse.ArgumentParser, name: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, sub_parser in action.choices.items():
                missing += flags_without_help(sub_parser, f"{name} {sub}")
        elif not action.help and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_flag_has_help() -> None:
    assert flags_without_help(bookie_parser(), "bookie") + flags_without_help(ledger_parser(), "ledger") == []


@pytest.mark.parametrize("module, name", [("bookie.server", "bookie"), ("pyspark_ledger.cli", "ledger")])
def test_version(module: str, name: str) -> None:
    out = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # The version of the code that runs (an editable install's metadata keeps the version it was
    # installed with); tests/upgrade/test_versions.py checks it is pyproject.toml's.
    assert out.stdout.strip() == f"{name} {RELEASE}"


def test_logs_read_is_a_command_with_from_and_limit() -> None:
    args = ledger_parser().parse_args(["logs", "read", "events", "--from", '{"seq": 0}', "--limit", "5", "--json"])
    assert (args.logs_command, args.name, args.start, args.limit, args.json) == ("read", "events", '{"seq": 0}', 5, True)
    assert ledger_parser().parse_args(["logs", "read", "events"]).limit == 1000
