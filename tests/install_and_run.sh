#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite.
#   - Debian's zookeeper package and a JRE 17 (for ZooKeeper and Spark), only when missing
#   - this package with its test extra
# Extra arguments go to pytest (e.g. `bash tests/install_and_run.sh -k metadata`).
# LEDGER_PYSPARK=lowest installs the lowest supported PySpark (tests/constraints-lowest.txt)
# instead of the newest, to test the lower bound of pyproject.toml's pin.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
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
"$PYTHON" -m pip install -q --disable-pip-version-check "${pins[@]}" -e '.[test]' --config-settings editable_mode=compat
# Two worker processes, one test file each at a time (module and session fixtures stay whole);
# LEDGER_TEST_WORKERS=0 runs in one process.
exec "$PYTHON" -m pytest -n "${LEDGER_TEST_WORKERS:-2}" --dist loadfile "$@"
