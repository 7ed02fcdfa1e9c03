"""No dangling references (issue 35 item 4): every relative link of README.md and docs/*.md
points to a file (and heading) that exists, and every repository path that the docs, the code's
comments and docstrings, and the tests mention (`docs/x.md`, `bookie/y.py`, `tests/z/w.py`, a
top-level `NAME.md`) names a file or directory of the repository.

Only paths rooted at a top-level directory of the repository are checked (a name relative to
its own package, `storage/journal.py`, is ambiguous by nature). Paths that are examples by
nature are in ALLOWED, each with the reason. CHANGELOG.md is history: it may name files that
are gone, and is not read.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Files whose text is read for path tokens: what a reader follows (docs, README, examples) and
# what a maintainer follows (product code, tests, benchmarks, CI scripts).
SCANNED_SUFFIXES = (".md", ".py", ".sh", ".toml", ".service", ".yml", ".yaml", ".cfg", ".txt")
NOT_SCANNED = {"CHANGELOG.md"}

# A path token: a top-level directory of the repository, then at least one more component; or a
# top-level Markdown file named in capitals (README.md, DESIGN.md). Placeholders (<home>, {name},
# *, ...) make a token an example, not a path: such tokens are skipped.
TOP_DIRS = ("bookie", "metadata", "pyspark_ledger", "tests", "docs", "examples", "bench", ".ci")
TOP_DIR = "|".join(re.escape(d) for d in TOP_DIRS)
PATH_TOKEN = re.compile(rf"(?<![\w./-])((?:{TOP_DIR})/[\w./-]*[\w-])|(?<![\w./-])([A-Z][A-Z_]+\.md)\b")
# What a path token ending in one of these names: a file (anything else after a dot is an attribute).
FILE_SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ".json", ".proto", ".png", ".svg", ".csv", ".yml", ".yaml",
                 ".cfg", ".service", ".log", ".db", ".pem", ".bin", ".parquet", ".html"}
PLACEHOLDER = re.compile(r"[<>{}*]|\.\.\.|/\.\.?/|/$")

# Tokens that are examples by nature, with why. (file, token): the token is allowed in that file only.
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/test_references.py", "bookie/y.py"): "the docstring's example of a path token",
    ("tests/test_references.py", "tests/z/w.py"): "the docstring's example of a path token",
    ("tests/test_references.py", "docs/x.md"): "the docstring's example of a path token",
    ("tests/test_references.py", "DESIGN.md"): "the docstring's example of a top-level Markdown name",
    ("tests/test_references.py", "NAME.md"): "the docstring's example of a top-level Markdown name",
    ("tests/test_references.py", "bookie/no_such_module.py"): "the planted dangling path the checker must catch",
    ("tests/test_references.py", "bench/x.py"): "the key of the next entry",
    ("bench/nats_baseline.py", "bench/x.py"): "how to run any script of bench/, not one file",
}

# A Markdown link: [text](target), target without spaces; images too.
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return sorted(REPO / f for f in out if (REPO / f).is_file())


def scanned_files() -> list[Path]:
    return [f for f in tracked_files() if f.suffix in SCANNED_SUFFIXES and f.name not in NOT_SCANNED
            and "_pb2" not in f.name and "vectors" not in f.parts]


def path_tokens(text: str) -> set[str]:
    tokens = set()
    for m in PATH_TOKEN.finditer(text):
        token = (m.group(1) or m.group(2)).rstrip(".")
        end = m.end()
        if PLACEHOLDER.search(token) or text[end:end + 1] in ("*", "<", "{"):
            continue
        tokens.add(token)
    return tokens


def exists(token: str) -> bool:
    path = REPO / token
    if path.exists():
        return True
    # A module named as a path without its suffix (pyspark_ledger/cli/app), or with an attribute
    # (bookie/gc_service.start_gc): the module's file must exist.
    module = path.parent / path.name.split(".", 1)[0]
    return path.suffix not in FILE_SUFFIXES and module.with_suffix(".py").exists()


def dangling_paths(files: list[Path]) -> list[str]:
    bad = []
    for f in files:
        rel = str(f.relative_to(REPO))
        for token in sorted(path_tokens(f.read_text(errors="replace"))):
            if (rel, token) not in ALLOWED and not exists(token):
                bad.append(f"{rel}: {token}")
    return bad


def heading_anchors(md: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation but hyphens and
    spaces dropped, spaces turned into hyphens; a repeated heading gets -1, -2, ..."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in md.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def dangling_links(files: list[Path], root: Path = REPO) -> list[str]:
    bad = []
    for md in files:
        in_fence = False
        for number, line in enumerate(md.read_text().splitlines(), 1):
            if FENCE.match(line):
                in_fence = not in_fence
            if in_fence:
                continue
            for target in MD_LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                    continue
                path_part, _, anchor = target.partition("#")
                dest = (md.parent / path_part).resolve() if path_part else md
                where = f"{md.relative_to(root)}:{number}: {target}"
                if not dest.exists():
                    bad.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
                    bad.append(f"{where} (no such heading)")
    return bad


def test_every_relative_link_of_the_docs_resolves() -> None:
    bad = dangling_links(markdown_files())
    assert not bad, "dangling links:\n" + "\n".join(bad)


def test_every_repository_path_mentioned_exists() -> None:
    bad = dangling_paths(scanned_files())
    assert not bad, "paths that are not in the repository:\n" + "\n".join(bad)


def test_every_allowed_example_is_still_used() -> None:
    """An allow-list entry whose token is gone (or now exists) is stale."""
    stale = [f"{f}: {t}" for (f, t) in ALLOWED if t not in path_tokens((REPO / f).read_text()) or exists(t)]
    assert not stale, "\n".join(stale)


# The checkers catch what they are for: a planted dangling path, link and anchor.
def test_the_checkers_catch_planted_mistakes(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('"""See DESIGN.md and bookie/no_such_module.py; docs/cli.md exists."""\n'
                       "# a placeholder is not a path: <home>/bookies/bookie-N.log, tests/*.py\n")
    found = {line.split(": ", 1)[1] for line in _dangling_outside(planted)}
    assert found == {"DESIGN.md", "bookie/no_such_module.py"}, found

    md = REPO / "docs" / "cli.md"
    page = tmp_path / "page.md"
    page.write_text("[ok](cli.md#ledger-standalone) [gone](no-such.md) [bad anchor](cli.md#no-such-heading)\n"
                    "[web](https://example.org/x.md)\n```\n[in a fence](nowhere.md)\n```\n")
    (tmp_path / "cli.md").write_text(md.read_text())
    bad = dangling_links([page], root=tmp_path)
    assert bad == ["page.md:1: no-such.md (no such file)", "page.md:1: cli.md#no-such-heading (no such heading)"], bad


def _dangling_outside(f: Path) -> list[str]:
    return [f"{f.name}: {t}" for t in sorted(path_tokens(f.read_text())) if not exists(t)]


@pytest.mark.parametrize("title, anchor", [("## `ledger standalone`", "ledger-standalone"),
                                           ("### 4. Autorecovery", "4-autorecovery"),
                                           ("## Spark: the `ledger` data source", "spark-the-ledger-data-source")])
def test_heading_anchors_follow_github(tmp_path: Path, title: str, anchor: str) -> None:
    md = tmp_path / "h.md"
    md.write_text(f"{title}\n")
    assert heading_anchors(md) == {anchor}
