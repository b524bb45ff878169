#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time over a copy of its committed corpus (so the corpus
# in the repository only changes by hand). A crash, a leak, a sanitizer report, a timeout or a
# broken promise fails the run; the input that did it is kept under ARTIFACTS, and a copy of it
# belongs in the committed corpus once the bug is fixed.
#
# usage: run_fuzz.sh FUZZER CORPUS SECONDS ARTIFACTS
#   e.g. bash tests/fuzz/run_fuzz.sh build-fuzz/tests/fuzz/fuzz_onnx tests/fuzz/corpus_onnx 600 out
set -euo pipefail
fuzzer=$1 corpus=$2 seconds=$3 artifacts=$4

work=$(mktemp -d "${TMPDIR:-/tmp}/f8c-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$artifacts"
cp -R "$corpus/." "$work/corpus/"

status=0
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$work/corpus" || status=$?
if [ "$status" -ne 0 ]; then
  echo "run_fuzz: $(basename "$fuzzer") failed (exit $status); the input is under $artifacts:" >&2
  ls -l "$artifacts" >&2
  echo "run_fuzz: reproduce with: $fuzzer $artifacts/<file>" >&2
fi
exit "$status"
