#!/usr/bin/env bash
# The long fuzzing runs (issue 21: an hour per target, spread over sessions), which keep what
# they grow: the corpora found so far live minimized in tests/fuzz/grown.tar.xz (a few hundred
# KB of xz for megabytes of inputs), each turn starts from them and the committed seeds, and
# ends by merging what it found back in (libFuzzer's -merge=1, which keeps only inputs that add
# coverage). Every turn is a line of tests/fuzz/hours.tsv: date, target, seconds, executions,
# result; commit both files after a run. Runs for other targets may go on at the same time (one
# per processor): each turn replaces only its own target's corpus in the tarball, under a lock.
# A crash, leak, sanitizer report or timeout keeps its input under ARTIFACTS and fails the turn;
# fix it, then add the input to corpus_<target>. An input is a hang after 30 s: the turns run
# niced, side by side on a two-core machine, where an input of 1.6 s alone (a JSON description
# of 712 layers through fuse-patterns) passed libFuzzer's default of 10 s (2026-12-06).
#
# usage: fuzz_hours.sh FUZZ_BUILD SECONDS_PER_TURN ARTIFACTS [TARGET...]
#   e.g. bash tests/fuzz/fuzz_hours.sh build-fuzz 900 /tmp/fuzz-crashes onnx text json
#   (targets: onnx text json plan safetensors npy report, all of them by default; build the fuzz
#   preset first: cmake --preset fuzz && cmake --build --preset fuzz)
set -euo pipefail
hang=30 # seconds
here=$(cd "$(dirname "$0")" && pwd)
build=$1 seconds=$2 artifacts=$3
shift 3
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx text json plan safetensors npy report)

work=$(mktemp -d "${TMPDIR:-/tmp}/f8c-fuzz-hours-XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -f "$here/grown.tar.xz" ] && tar -C "$work" -xJf "$here/grown.tar.xz"
status=0
for target in "${targets[@]}"; do
	fuzzer=$build/tests/fuzz/fuzz_$target
	mkdir -p "$work/grown_$target" "$work/turn_$target" "$artifacts/$target"
	cp -R "$here/corpus_$target/." "$work/turn_$target/"
	cp -R "$work/grown_$target/." "$work/turn_$target/"
	start=$(date +%s)
	result=passed
	"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout="$hang" -print_final_stats=1 \
		-artifact_prefix="$artifacts/$target/" "$work/turn_$target" >"$work/$target.log" 2>&1 ||
		result="FAILED ($?): $(ls "$artifacts/$target" | head -1)"
	executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log")
	printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$target" \
		"$(($(date +%s) - start))" "${executions:-?}" "$result" >>"$here/hours.tsv"
	echo "fuzz_hours: $target: $result, $(($(date +%s) - start)) s, ${executions:-?} executions"
	[ "$result" = passed ] || { status=1; tail -40 "$work/$target.log" >&2; }
	# What the turn found, merged into the grown corpus without the committed seeds' coverage.
	rm -rf "$work/merged_$target" && mkdir "$work/merged_$target"
	"$fuzzer" -merge=1 -rss_limit_mb=2048 -timeout="$hang" "$work/merged_$target" \
		"$work/grown_$target" "$work/turn_$target" >"$work/$target.merge.log" 2>&1 || true
	rm -rf "$work/grown_$target" && mv "$work/merged_$target" "$work/grown_$target"
	# Into the tarball as it is now (another run may have replaced its own target's corpus
	# since this one started): this target's corpus replaced, the others' kept.
	(
		flock 9
		rm -rf "$work/now" && mkdir "$work/now"
		[ -f "$here/grown.tar.xz" ] && tar -C "$work/now" -xJf "$here/grown.tar.xz"
		rm -rf "$work/now/grown_$target" && cp -R "$work/grown_$target" "$work/now/"
		(cd "$work/now" && tar -cJf "$here/grown.tar.xz.new" grown_*) &&
			mv "$here/grown.tar.xz.new" "$here/grown.tar.xz"
	) 9>"${TMPDIR:-/tmp}/f8c-fuzz-grown.lock"
done
exit "$status"
