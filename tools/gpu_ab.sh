#!/bin/sh
# Changes to the plans' kernels measured on a GPU, side by side, in one device call.
#
# Here:  sh tools/gpu_ab.sh prepare CHECKS CARRY LABEL=F8C[@NAME,...] ...
#   CHECKS: a folder that `tools/gpu_checks.sh prepare` made (its runtime f8c, backend_ops_cuda
#   and the op cases, the libraries, gpt-tiny's step plans): its compiler's kernels are the ones
#   the GPU checks hold to the CPU; CARRY: an ignored folder of the checkout, which the device
#   tool carries; then one LABEL=F8C for each compiler to compare (full builds' f8c; the
#   first is the baseline, as `before`), each compiling the bench plans below, or only those
#   named after @. Only the plans' kernels may differ: the one runtime f8c runs them all.
# There: sh CARRY/gpu_ab.sh run
#   the backend op cases and gpt-tiny's steps against the CPU (run.sh ops steps), then each
#   plan under each label in turn through gpu_bench.py (tokens/s, the profile), skipping what
#   would not finish inside the call (AB_SECONDS after the start, default 520); results in
#   $OUT/ab.tar.xz (the device tool brings back 8 files at most: summary.txt, bench-*.json,
#   profile-*.json, the logs) and $OUT/summary.txt, which each plan's line reaches at once.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

# gpu_checks.sh's bench plans and options, word for word.
plans() {
	cat <<BENCH
gpt-1.3b-delayed gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe delayed
gpt2-124m-delayed gpt2-124m 16 1024 --fp8-format hybrid --fp8-recipe delayed
gpt-1.3b-bf16 gpt-1.3b 8 2048
gpt2-124m-bf16 gpt2-124m 16 1024
BENCH
}
bench="--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-decay-iters 1000 --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16"

prepare() {
	checks=$1 carry=$2
	shift 2
	root=$(cd "$here/.." && pwd)
	rm -rf "$carry" && mkdir -p "$carry/plans" "$carry/bench"
	cp "$checks/carry/f8c" "$checks/carry/backend_ops_cuda" "$checks/carry/ops.tar.xz" \
		"$checks/carry/libs.tar.xz" "$checks/carry/run.sh" "$checks/carry/gpu_compare.py" \
		"$checks/carry/gpu_bench.py" "$checks/carry/tokens.bin" "$here/gpu_ab.sh" "$carry/"
	# gpu_checks.sh packs its plans into a tarball: the four step plans come out of it here,
	# unpacked (this carry has no tarball for run.sh to unpack).
	tar -C "$carry" -xJf "$checks/carry/plans.tar.xz" plans/gpt-tiny plans/gpt-tiny-bf16 \
		plans/gpt-tiny-delayed plans/gpt-tiny-current
	: >"$carry/runs"
	plans | while read -r name model batch seq options; do
		for side in "$@"; do
			label=${side%%=*} f8c=${side#*=} only=
			case $f8c in *@*) only=${f8c#*@} f8c=${f8c%%@*} ;; esac
			if [ -n "$only" ] && ! echo ",$only," | grep -q ",$name,"; then
				continue
			fi
			# shellcheck disable=SC2086 # the options are words
			"$f8c" compile "$root/models/$model.json" -o "$carry/bench/$label-$name" $bench \
				--micro-batch-size "$batch" --global-batch-size "$batch" \
				--seq-length "$seq" $options >"$carry/bench/$label-$name.log" 2>&1
			echo "$label-$name" >>"$carry/runs"
		done
	done
	tar -C "$carry" -cJf "$carry/bench.tar.xz" bench && rm -rf "$carry/bench"
	du -sh "$carry"
}

run() {
	back=${OUT:-$PWD/out} out=/tmp/ab/out
	mkdir -p "$back" "$out"
	start=$(date +%s)
	OUT=$out sh "$here/run.sh" ops steps
	export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
	tar -C /tmp/ab -xJf "$here/bench.tar.xz"
	for run in $(cat "$here/runs"); do
		# 45 s a plan at most: stop where the call would end before the results come back.
		if [ $(($(date +%s) - start)) -ge "${AB_SECONDS:-520}" ]; then
			echo "$run: skipped (time)" >>"$out/summary.txt"
			continue
		fi
		python3 "$here/gpu_bench.py" "$here/f8c" "/tmp/ab/bench/$run" "$here/tokens.bin" \
			"/tmp/ab/work-$run" >"$out/bench-$run.log" 2>&1
		cp "/tmp/ab/work-$run/bench.json" "$out/bench-$run.json" 2>/dev/null
		cp "/tmp/ab/work-$run/profile.json" "$out/profile-$run.json" 2>/dev/null
		echo "$run: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['tokens_per_s'], 'tokens/s', d['step_ms'], 'ms')" "$out/bench-$run.json" 2>/dev/null)" >>"$out/summary.txt"
		cp "$out/summary.txt" "$back/" # what a call cut short still brings back
	done
	tar -C "$out" -cJf "$back/ab.tar.xz" . && cp "$out/summary.txt" "$back/"
}

case ${1:-} in
prepare) shift && [ $# -ge 3 ] && prepare "$@" ;;
run) run ;;
*) echo "usage: tools/gpu_ab.sh prepare CHECKS CARRY LABEL=F8C[@NAME,...] ... | run" >&2; exit 2 ;;
esac
