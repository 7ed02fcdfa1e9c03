"""The previous release, built from this repository's own history, for mixed-version tests.

RELEASES.toml (at the repository's top) lists every release's version and commit. `build_release`
takes one of them and makes it runnable next to the checkout's code:

1. `git archive` of the release's commit into a cache directory (a clear ReleaseBuildError naming
   the commit when the clone lacks it, e.g. a shallow clone);
2. a virtual environment made with `--system-site-packages --without-pip`, plus a .pth file that
   adds the RUNNING interpreter's site directories: `python -m venv` run from inside a venv links
   the base interpreter's site-packages, not that venv's, where the suite's dependencies may live;
3. `pip install --no-deps --no-build-isolation --no-index` of the archive into it (the running
   interpreter's pip, setuptools and wheel; nothing is downloaded, PySpark is not reinstalled).

The venv's own copy of bookie, metadata and pyspark_ledger comes first on its sys.path, ahead of
the shared site directories (where an editable install of the checkout may live). Processes of the
old release must also not inherit PYTHONPATH (the suite points it at the checkout) nor start in
the checkout (`python -m` puts the working directory first): `OldRelease.env()` and `.cwd` see to
both, and `build_release` checks that the venv imports the archive's modules, not the checkout's.

A build is cached under <checkout>/.cache/releases/ (git-ignored; LEDGER_RELEASE_CACHE moves it),
keyed by the commit and the interpreter, and reused by every later run; a file lock lets
concurrent runs share it. Building takes about 2 s here (`OldRelease.build_s`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.testing.local_cluster import BookieLauncher

RELEASES_FILE = "RELEASES.toml"
CACHE_ENV = "LEDGER_RELEASE_CACHE"
BUILD_TIMEOUT_S = 300.0
PACKAGES = ("bookie", "metadata", "pyspark_ledger")
# Environment variables that would make an old-release process import the checkout's code.
_LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")


class ReleaseBuildError(PySparkLedgerError, RuntimeError):
    """The release could not be built (missing history, a failed install, the wrong code imported)."""


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    commit: str  # full 40-digit hash

    def __post_init__(self) -> None:
        if len(self.commit) != 40 or any(c not in "0123456789abcdef" for c in self.commit):
            raise ReleaseBuildError(f"release {self.version}: commit {self.commit!r} is not a full 40-digit hash")


def repository_root(start: Path | None = None) -> Path:
    """The checkout holding RELEASES.toml: the one this module lives in."""
    here = (start or Path(__file__)).resolve()
    for d in (here, *here.parents):
        if (d / RELEASES_FILE).is_file():
            return d
    raise ReleaseBuildError(f"no {RELEASES_FILE} above {here}: mixed-version tests need a checkout")


def read_releases(root: Path) -> list[Release]:
    """Every release in RELEASES.toml, oldest first."""
    path = root / RELEASES_FILE
    try:
        raw = tomllib.loads(path.read_text())
        out = [Release(str(r["version"]), str(r["commit"])) for r in raw["release"]]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise ReleaseBuildError(f"{path}: not a list of [[release]] tables with version and commit: {exc}") from exc
    if not out:
        raise ReleaseBuildError(f"{path} lists no release")
    return out


def last_release(root: Path | None = None) -> Release:
    root = root or repository_root()
    return read_releases(root)[-1]


@dataclass(frozen=True)
class OldRelease:
    """A built release: run its `bookie` script, or its python, with env() and cwd."""

    release: Release
    home: Path  # the cache entry: src/ (the archive), venv/
    build_s: float  # what building it cost (0.0 when the cache had it)

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def bookie_script(self) -> Path:
        return self.venv / "bin" / "bookie"

    @property
    def site_packages(self) -> Path:
        return self.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    @property
    def cwd(self) -> Path:
        """A working directory outside the checkout for the release's processes."""
        return self.home

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment without what would put the checkout's code first."""
        env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
        env.update(extra or {})
        return env

    def launcher(self) -> BookieLauncher:
        """Start a LocalBookie with the release's `bookie` script."""
        return BookieLauncher((str(self.bookie_script),), self.env(), str(self.cwd))

    def module_files(self) -> dict[str, str]:
        """Where the release's python imports each package from (run in its environment)."""
        code = "import json, bookie, metadata, pyspark_ledger; " \
               "print(json.dumps({m.__name__: m.__file__ for m in (bookie, metadata, pyspark_ledger)}))"
        out = subprocess.run([str(self.python), "-c", code], env=self.env(), cwd=self.cwd, capture_output=True,
                             text=True, timeout=60)
        if out.returncode != 0:
            raise ReleaseBuildError(f"release {self.release.version}: its python cannot import the packages:\n{out.stderr}")
        files: dict[str, str] = json.loads(out.stdout)
        return files

    def check_imports_old_code(self) -> None:
        """Every package comes from the venv's own copy, never from the checkout or another install."""
        files = self.module_files()
        wrong = {name: f for name, f in files.items() if not Path(f).resolve().is_relative_to(self.site_packages.resolve())}
        if wrong:
            raise ReleaseBuildError(f"release {self.release.version} imports code from outside its venv "
                                    f"{self.site_packages}: {wrong}")


def build_release(release: Release, root: Path | None = None, cache_dir: Path | None = None) -> OldRelease:
    """The release, built once per commit and interpreter (see the module's docstring)."""
    root = root or repository_root()
    cache_dir = cache_dir or Path(os.environ.get(CACHE_ENV) or root / ".cache" / "releases")
    cache_dir.mkdir(parents=True, exist_ok=True)
    home = cache_dir / f"{release.version}-{release.commit[:12]}-{_interpreter_key()}"
    with open(cache_dir / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent run builds it; we then reuse it
        if (home / "ready.json").is_file():
            return OldRelease(release, home, 0.0)
        shutil.rmtree(home, ignore_errors=True)  # a build that was interrupted
        started = time.monotonic()
        _build(release, root, home)
        built = OldRelease(release, home, time.monotonic() - started)
        built.check_imports_old_code()
        (home / "ready.json").write_text(json.dumps({"version": release.version, "commit": release.commit,
                                                     "python": sys.executable, "build_s": round(built.build_s, 2)}))
        return built


def _interpreter_key() -> str:
    """The venv is tied to the interpreter and the site directories its .pth names."""
    text = json.dumps([sys.executable, sys.version, _running_site_dirs()])
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _running_site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def _run(args: list[str], what: str, *, input: bytes | None = None, env: dict[str, str] | None = None,
         cwd: str | None = None) -> None:
    try:
        out = subprocess.run(args, capture_output=True, timeout=BUILD_TIMEOUT_S, input=input, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        raise ReleaseBuildError(f"{what}: no result within {BUILD_TIMEOUT_S:g} s") from exc
    if out.returncode != 0:
        raise ReleaseBuildError(f"{what} failed ({out.returncode}):\n{out.stderr.decode(errors='replace')[-3000:]}")


def _build(release: Release, root: Path, home: Path) -> None:
    src, venv = home / "src", home / "venv"
    src.mkdir(parents=True)
    has_commit = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{release.commit}^{{commit}}"],
                                capture_output=True, timeout=60)
    if has_commit.returncode != 0:
        raise ReleaseBuildError(
            f"release {release.version}: commit {release.commit} is not in the history of {root} (a shallow clone? "
            f"`git fetch --unshallow` or a full clone brings it); the mixed-version tests build that release from it")
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", release.commit],
                             capture_output=True, timeout=BUILD_TIMEOUT_S)
    if archive.returncode != 0:
        raise ReleaseBuildError(f"git archive {release.commit} failed: {archive.stderr.decode(errors='replace')}")
    _run(["tar", "-x", "-C", str(src)], f"unpacking release {release.version}", input=archive.stdout)
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], "python -m venv")
    built = OldRelease(release, home, 0.0)
    # `import` lines of a .pth run at start-up: addsitedir also reads the .pth files there.
    lines = [f"import site; site.addsitedir({d!r})" for d in _running_site_dirs()]
    (built.site_packages / "_running_interpreter_sites.pth").write_text("\n".join(lines) + "\n")
    _run([str(built.python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--disable-pip-version-check", str(src)], f"pip install of release {release.version}",
         env=built.env(), cwd=str(home))
