#!/usr/bin/env bash
# Compiles the JVM decoder (lakehouse/jvm/**/*.java) against the pyspark wheel's own jars
# (the Spark, Jackson and Scala versions the session runs) into one jar: $1 (default
# .cache/jars/decoder/cdc-enrich-decoder.jar). Used by tools/setup.sh and by the Databricks
# bundle's artifact build. Needs a JDK (javac) and the venv's pyspark.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.cache/jars/decoder/cdc-enrich-decoder.jar}
PY=${PYTHON_FOR_JARS:-.venv/bin/python}
command -v javac >/dev/null || { echo "build-decoder: javac (a JDK 17+) is required: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }
spark_jars=$("$PY" -c 'import pyspark,os;print(os.path.join(os.path.dirname(pyspark.__file__),"jars"))')
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -nowarn -Xlint:none -encoding UTF-8 -cp "$spark_jars/*" -d "$classes" $(find lakehouse/jvm -name '*.java' | sort)
mkdir -p "$(dirname "$out")"
rm -f "$out"
jar cf "$out" -C "$classes" .
echo "build-decoder: wrote $out"
