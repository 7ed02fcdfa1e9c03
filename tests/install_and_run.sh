#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite,
# leaving the caller's Python untouched:
#   - Debian's zookeeper package and a JRE 17 (for ZooKeeper and Spark), only when missing
#   - a virtual environment of its own, .venv-test in the checkout (git-ignored), created with
#     --system-site-packages from $PYTHON (default python3) the first time and reused after
#   - into that venv: this package (editable, compat mode) with its test extra, and the lowest
#     PySpark the package supports (tests/constraints-lowest.txt, the default,
#     LEDGER_PYSPARK=lowest) or the newest release (LEDGER_PYSPARK=newest)
# The venv sees the caller's packages (no download of what is already there) but its own
# site-packages come first on sys.path, so the pins win: a caller with PySpark 4.3.0 keeps it, and
# the suite runs on the 4.2.0 installed in the venv. Its bin/ goes first on PATH, so `python3`,
# `bookie`, `ledger` and Spark's Python workers (PYSPARK_PYTHON unset: Spark runs `python3`) are
# the venv's. Delete .venv-test to start from nothing.
# Extra arguments go to pytest (e.g. `bash tests/install_and_run.sh -k metadata`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="$PWD/.venv-test"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

started=$SECONDS
# A venv whose interpreter no longer runs (the base Python moved or was upgraded) is made anew.
if ! "$VENV/bin/python" -c "" >/dev/null 2>&1; then
    echo "creating $VENV (from $("$PYTHON" -c 'import sys; print(sys.executable)'))"
    rm -rf "$VENV"
    "$PYTHON" -m venv --system-site-packages "$VENV"
fi

# compat editable mode: the repository goes on sys.path, so Spark's workers find the
# `pyspark_ledger` data source by listing modules (the default mode's import hook hides it).
# The suite runs on the lowest PySpark the package supports (tests/constraints-lowest.txt), so CI
# proves pyproject.toml's lower bound; LEDGER_PYSPARK=newest upgrades to the newest release instead.
pins=()
case "${LEDGER_PYSPARK:-lowest}" in
    lowest) pins=(-c tests/constraints-lowest.txt) ;;
    newest) pins=(--upgrade 'pyspark[connect]>=4.2,<5') ;;
    *) echo "LEDGER_PYSPARK=${LEDGER_PYSPARK}: unknown value (use lowest, the default, or newest)" >&2; exit 2 ;;
esac
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" -e '.[test]' --config-settings editable_mode=compat
echo "test venv $VENV ready in $((SECONDS - started)) s: $("$VENV/bin/python" -c 'import pyspark; print("PySpark", pyspark.__version__)')"

export PATH="$VENV/bin:$PATH"
export VIRTUAL_ENV="$VENV"
# Two worker processes, one test file each at a time (module and session fixtures stay whole);
# LEDGER_TEST_WORKERS=0 runs in one process.
exec "$VENV/bin/python" -m pytest -n "${LEDGER_TEST_WORKERS:-2}" --dist loadfile "$@"
