#!/usr/bin/env bash
# Idempotent set-up: a venv inside the repo and the JVM jars from Maven Central, each redone
# only when its inputs change (stamp files hold a hash of the inputs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
mkdir -p .cache

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# 1. Python: .venv with the pinned packages and this project (editable).
py_stamp=".cache/venv.$(hash_of pyproject.toml)"
if [ ! -f "$py_stamp" ] || [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv and installing Python packages (pinned in pyproject.toml)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check --upgrade pip
  # --no-compile: pip would byte-compile every module of every package (pyspark's and GX's most
  # of all), one at a time: a fresh venv with pip's cache warm took 70.8 and 69.9 s with, 30.1 and
  # 35.8 s without. Step 1b compiles them on every core instead.
  .venv/bin/pip install -q --disable-pip-version-check --no-compile -e ".[local,dev]"
  rm -f .cache/venv.* .cache/pyc.*; touch "$py_stamp"
fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')  # the venv's packages
# 1b. The venv's packages byte-compiled once, on every core. A process that imports a module
#     compiles it in memory only when PYTHONDONTWRITEBYTECODE is set, as it is on this machine (and
#     in many CI images): every process (each pytest worker, each job the tests start, each Spark
#     Python worker) then compiled GX, pandas, scipy and pyspark again, ~10 s of CPU each.
#     Measured 2026-12-02 (2 cores): 19.5 s once; `import great_expectations` 11.2 s -> 5.3 s,
#     collecting the suite 21.6 s -> 11.8 s per process (wall; CPU 20.4 s -> 11.7 s).
pyc_stamp=".cache/pyc.$(hash_of pyproject.toml)"
if [ ! -f "$pyc_stamp" ]; then
  echo "setup: byte-compiling the venv's packages"
  .venv/bin/python -m compileall -q -j 0 "$site" >/dev/null
  rm -f .cache/pyc.*; touch "$pyc_stamp"
fi
# The checkout's development packages (devstack/, testkit/) are not in the wheel: a .pth puts the
# checkout on the venv's path so that the CLI, the tests and the benchmarks find them anywhere.
[ "$(cat "$site/cdc_enrich_checkout.pth" 2>/dev/null)" = "$ROOT" ] || echo "$ROOT" > "$site/cdc_enrich_checkout.pth"

# 2. JVM jars: resolved by Maven into a staging folder, then only what pyspark lacks is kept
#    (the pyspark wheel already ships Hadoop, Parquet, Jackson, Scala; two copies would clash).
resolve() {  # $1 = kind (spark|kafka)
  local kind=$1 pom=tools/jvm/$1/pom.xml out=.cache/jars/$1
  local stamp=".cache/jars.$kind.$(hash_of "$pom" tools/setup.sh)"
  if [ -f "$stamp" ] && ls "$out"/*.jar >/dev/null 2>&1; then return; fi
  command -v mvn >/dev/null || { echo "setup: Maven (mvn) is required to fetch jars from Maven Central" >&2; exit 1; }
  command -v java >/dev/null || { echo "setup: Java 17+ is required (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
  echo "setup: resolving $kind jars from Maven Central"
  local stage=.cache/jars/$kind.staging
  rm -rf "$stage" "$out"; mkdir -p "$stage" "$out"
  # (Maven prints colour resets even in batch mode: strip them; pipefail keeps its exit status)
  mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$ROOT/$stage" 2>&1 | sed "s/\x1b\[[0-9;]*m//g"
  if [ "$kind" = spark ]; then
    local have; have=$(.venv/bin/python -c 'import pyspark,os;print(os.path.join(os.path.dirname(pyspark.__file__),"jars"))')
    for j in "$stage"/*.jar; do
      local name; name=$(basename "$j" | sed -E 's/-[0-9][0-9A-Za-z.\-]*\.jar$//')
      case "$name" in jackson-*) continue ;; esac
      ls "$have" | sed -E 's/-[0-9][0-9A-Za-z.\-]*\.jar$//' | grep -qx "$name" || cp "$j" "$out/"
    done
  else
    cp "$stage"/*.jar "$out/"
  fi
  rm -rf "$stage"; rm -f .cache/jars."$kind".*; touch "$stamp"
}
resolve spark
resolve kafka
resolve connect

# 3. PostgreSQL server binaries, for the end-to-end test against a real database and Debezium
#    (devstack/postgres.py runs its own cluster under the lake; no system service is used).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin/initdb) and installing them needs root:" >&2
    echo "setup:   sudo apt-get update && sudo apt-get install -y postgresql   (then run make setup again)" >&2
    exit 1
  fi
  command -v apt-get >/dev/null || { echo "setup: PostgreSQL is missing and apt-get is not available: install the PostgreSQL server (initdb, postgres) and set CDC_ENRICH_PG_BIN to its bin directory" >&2; exit 1; }
  echo "setup: installing PostgreSQL from Debian's packages: apt-get update && apt-get install -y postgresql"
  echo "setup:   (postgresql-common first, told not to create and start a default 'main' cluster)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-common
  sed -ri 's/^#?\s*create_main_cluster\s*=.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
fi

# 3b. Chromium, for the test that opens the operators' page (cdc-enrich dashboard) in a real
#     headless browser (driven by Playwright, a dev package, with this browser: no download).
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: Chromium is missing (the dashboard's browser test needs it): sudo apt-get install -y chromium   (then run make setup again)" >&2
    exit 1
  fi
  echo "setup: installing Chromium from Debian's packages: apt-get install -y --no-install-recommends chromium"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
fi

# 4. The JVM decoder (bronze's fast pass), compiled against the venv's pyspark jars; redone
#    when its source or the pinned packages change.
decoder_stamp=".cache/decoder.$(hash_of $(find lakehouse/jvm -name '*.java' | sort) tools/build-decoder.sh pyproject.toml)"
if [ ! -f "$decoder_stamp" ] || [ ! -f .cache/jars/decoder/cdc-enrich-decoder.jar ]; then
  echo "setup: compiling the JVM decoder (lakehouse/jvm) against pyspark's jars"
  bash tools/build-decoder.sh .cache/jars/decoder/cdc-enrich-decoder.jar
  rm -f .cache/decoder.*; touch "$decoder_stamp"
fi

# 5. The local Spark driver's class archive (Java AppCDS, devstack/class_archive.py): every local
#    driver maps it at start instead of loading Spark's, Scala's and Delta's classes from the jars.
#    Redone when the JDK, the pinned packages, the jars (the decoder's by its stamp: a rebuilt jar
#    keeps its name) or the workload that records it change; without it (or if building it fails)
#    drivers only start slower.
archive=$(.venv/bin/python -c 'from lakehouse.paths import jvm_class_archive; print(jvm_class_archive())')
archive_inputs=$( { java -version 2>&1; cat pyproject.toml devstack/class_archive.py; ls .cache/jars/spark .cache/jars/decoder; echo "$decoder_stamp"; } | sha256sum | cut -c1-16)
archive_stamp=".cache/jvm.$archive_inputs"
if [ ! -f "$archive_stamp" ] || [ ! -f "$archive" ]; then
  echo "setup: recording the JVM class archive of a local Spark driver (about two minutes, once)"
  mkdir -p .cache/jvm
  if CDC_ENRICH_JVM_OPTIONS="-XX:TieredStopAtLevel=1" .venv/bin/python -m devstack.class_archive > .cache/jvm/build.log 2>&1; then
    grep '^setup:' .cache/jvm/build.log || true
    rm -f .cache/jvm.*; touch "$archive_stamp"
  else
    echo "setup: WARNING: the JVM class archive could not be built (drivers start slower); see .cache/jvm/build.log" >&2
  fi
fi
