"""ruff and mypy, as configured in pyproject.toml, pass over the repository; every suppression
of one of their findings names what it suppresses and says why (docs/contributing.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Long enough for a cold mypy run (no cache yet) on the two shared cores under load.
LINT_TIMEOUT_S = 600

# A noqa comment: its codes, then " - why" (or "  # why").
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
NOQA_WITH_REASON = re.compile(r"^:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s*(-|—|#)\s*\S")
# A type-ignore comment: its [error-code], then "  # why".
TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<rest>.*)$")
TYPE_IGNORE_WITH_REASON = re.compile(r"^\[[a-z-]+(,\s*[a-z-]+)*\]\s*#\s*\S")


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=LINT_TIMEOUT_S)


def test_ruff_check_is_clean() -> None:
    done = run_tool("ruff", "check", "--no-cache", ".")
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"


def test_mypy_is_clean() -> None:
    # The packages to check come from [tool.mypy] files in pyproject.toml.
    done = run_tool("mypy")
    assert done.returncode == 0, f"mypy found problems:\n{done.stdout}{done.stderr}"


def tracked_python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): walk the tree instead
        return [p for p in REPO.rglob("*.py") if ".git" not in p.parts]
    return [REPO / name for name in listed.stdout.split()]


def explained(line: str) -> bool:
    """Whether each noqa and type: ignore on the line names its codes and gives a reason."""
    noqa = NOQA.search(line)
    if noqa and not NOQA_WITH_REASON.match(noqa.group("rest")):
        return False
    ignore = TYPE_IGNORE.search(line)
    return not (ignore and not TYPE_IGNORE_WITH_REASON.match(ignore.group("rest")))


def unexplained_suppressions(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for n, line in enumerate(lines, start=1)
            if not explained(line)]


# Spelled in pieces so that neither ruff nor the check below takes these lines for the real thing.
NOQA_MARK, IGNORE_MARK = "# no" + "qa", "# type: " + "ignore"


@pytest.mark.parametrize("line, expected", [
    (f"except Exception:  {NOQA_MARK}: BLE001 - keep serving", True),
    (f"import x  {NOQA_MARK}: E402,F401 - re-exported", True),
    (f"import x  {NOQA_MARK}: E402", False),
    (f"import x  {NOQA_MARK}", False),
    (f"x = f()  {IGNORE_MARK}[attr-defined]  # grpc's stubs lack it", True),
    (f"x = f()  {IGNORE_MARK}[attr-defined]", False),
    (f"x = f()  {IGNORE_MARK}", False),
])
def test_the_suppression_check_itself(line: str, expected: bool) -> None:
    assert explained(line) is expected


def test_every_noqa_and_type_ignore_names_its_code_and_says_why() -> None:
    generated = ("_pb2.py", "_pb2_grpc.py")
    bad = [b for p in tracked_python_files() if not p.name.endswith(generated) for b in unexplained_suppressions(p)]
    assert not bad, "suppressions without a code and a reason:\n" + "\n".join(bad)
