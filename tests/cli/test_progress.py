"""Progress bars (issue 23): tqdm on stderr whenever stderr is a terminal; never with --json or
when stderr is a pipe; stdout untouched either way."""

from __future__ import annotations

import io

import pytest

from pyspark_ledger.cli.output import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stderr_is_terminal, quiet, drawn", [(True, False, True), (True, True, False),
                                                              (False, False, False)])
def test_a_bar_is_drawn_only_on_a_terminal_and_never_for_json(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str],
                                                              stderr_is_terminal: bool, quiet: bool,
                                                              drawn: bool) -> None:
    err = Terminal() if stderr_is_terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    bar = Progress("recovering", 4, quiet=quiet)
    for _ in range(3):
        bar.update()
    bar.update(4)  # "this many done so far"
    bar.done()
    assert bar.enabled is drawn
    assert ("recovering" in err.getvalue() and "4/4" in err.getvalue()) is drawn
    assert capsys.readouterr().out == ""
