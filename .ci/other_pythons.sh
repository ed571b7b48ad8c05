#!/usr/bin/env bash
# The unit tests (tests/, no broker, no Spark) under every other CPython that pyspark 4.3 supports
# and this machine has: version differences (Python 3.13's stricter TLS verification was one)
# show up here, in about a minute per version, before the long suite runs on the default Python.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {  # a working interpreter for version $1, on PATH or under pyenv
  local v=$1 py
  if py=$(command -v "python$v") && "$py" -c '' 2>/dev/null; then echo "$py"; return; fi
  local root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for py in $(ls -d "$root"/versions/"$v".*/bin/python 2>/dev/null | sort -V -r); do
    "$py" -c '' 2>/dev/null && { echo "$py"; return; }
  done
  return 1
}

default=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ran=()
for v in 3.11 3.12 3.13; do
  [ "$v" = "$default" ] && continue
  py=$(find_python "$v") || { echo "[other-pythons] Python $v: not on this machine"; continue; }
  venv=".venv-py$v"
  echo "[other-pythons] Python $v ($py): installing txkafka into $venv"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  { "$venv/bin/python" -m pip install -q --upgrade pip &&
    "$venv/bin/python" -m pip install -q -e '.[test,bench]'; } >"$venv/install.log" 2>&1 ||
    { cat "$venv/install.log"; echo "[other-pythons] Python $v: install failed"; exit 1; }
  "$venv/bin/python" .ci/editable_toplevel.py >/dev/null
  # Bytecode for this version, written once (PYTHONDONTWRITEBYTECODE, if set, only stops imports).
  "$venv/bin/python" -m compileall -q -j 0 connector python_datasource txkafka pyspark_txkafka.py
  echo "[other-pythons] Python $v: unit tests"
  # Exit code 5 (no tests collected) fails here like any other non-zero code.
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 1 tests
  ran+=("$v")
  newest="$venv"
done
if [ -n "${newest:-}" ]; then
  # One end-to-end proof on the newest of them: real Spark and a real broker, the driver killed
  # between two EndTxn calls and the restart recovering the batch exactly once.
  # Spark's Python processes import that venv's pyspark with its bytecode, as in the main suite
  # (.ci/pytest_gate.py); no class-data-sharing archive (it is built for the main suite's jars).
  echo "[other-pythons] ${newest#.venv-py}: Spark + Kafka, driver killed mid-commit"
  home=$("$newest/bin/python" -c 'from txkafka.devtools.spark_home_for_tests import build; print(build())')
  CI=true TXKAFKA_NO_CDS=1 SPARK_HOME="$home" "$newest/bin/python" -m pytest -q -p no:cacheprovider \
    -n 0 integration_tests/test_writer_exactly_once.py -k driver_killed_between_two_endtxn_calls
fi
echo "[other-pythons] unit tests passed under: ${ran[*]:-(no other Python found)}"
