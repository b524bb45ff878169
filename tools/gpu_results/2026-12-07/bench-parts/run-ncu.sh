#!/bin/sh
# ncu of the generated kernels short of 80% of the copy's bandwidth in GPT-1.3B FP8 delayed's
# step (issue 15; the families' figures from run-bench.sh's parts-gpt-1.3b-delayed.md), on the
# GPU machine, from the carry prepare.sh made (this script copied beside run-bench.sh):
#   sh run-ncu.sh KERNEL...      (PTX entry names of bench/gpt-1.3b-delayed/kernels.ptx)
# First one ncu run over a 2-iteration `f8c train` (eager: ncu times the kernels of a CUDA
# graph only as a whole) that profiles the second launch of each named kernel (--kernel-id's
# invocation number, counted per kernel); then, for each kernel that run did not profile, a
# run of its own, until $DEADLINE seconds (default 330) from the start. --clock-control none,
# as tools/bench_kernels.md's runs: the clocks as the step finds them. Everything in
# /tmp/ncu-out, packed into $OUT/results.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/ncu-out
deadline=${DEADLINE:-330}
start_all=$(date +%s)
mkdir -p "$out" /tmp/f8c-libs
[ -d "$here/bench" ] || tar -C "$here" -xJf "$here/bench.tar.xz"
tar -C /tmp/f8c-libs -xJf "$here/libs.tar.xz"
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ncu=/usr/local/cuda/bin/ncu
{
	echo "== call started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,clocks.sm,pstate --format=csv,noheader
	"$ncu" --version | tail -1
	cat "$here/commit.txt"
} >>"$out/summary.txt"
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
--section LaunchStats --section SchedulerStats --section WarpStateStats"
train="$here/f8c train $here/bench/gpt-1.3b-delayed --data $here/tokens.bin --train-iters 2 \
--eval-interval 0 --device cuda --no-cuda-graph"
names=$(echo "$@" | tr ' ' '|')
start=$(date +%s)
# shellcheck disable=SC2086 # the sections' and the command's words
timeout $((deadline - 30)) "$ncu" --clock-control none --kernel-id "::regex:^($names)\$:2" \
	$sections $train >"$out/ncu-all.txt" 2>&1
echo "ncu-all: rc $? in $(($(date +%s) - start)) s" >>"$out/summary.txt"
for kernel in "$@"; do
	grep -q "^  $kernel (" "$out/ncu-all.txt" && continue
	left=$((deadline - ($(date +%s) - start_all)))
	if [ "$left" -lt 25 ]; then
		echo "ncu-$kernel: SKIPPED ($left s left)" >>"$out/summary.txt"
		continue
	fi
	start=$(date +%s)
	# shellcheck disable=SC2086
	timeout "$left" "$ncu" --clock-control none --kernel-name "$kernel" --launch-skip 1 \
		--launch-count 1 $sections $train >"$out/ncu-$kernel.txt" 2>&1
	echo "ncu-$kernel: rc $? in $(($(date +%s) - start)) s" >>"$out/summary.txt"
done
echo "== call ended $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start_all)) s" >>"$out/summary.txt"
[ -n "${OUT:-}" ] && tar -C "$out" -czf "$OUT/results.tgz" . && cp "$out/summary.txt" "$OUT/"
# Short, for the reply's tail: per kernel its duration, DRAM and SM throughput, occupancy.
cat "$out"/ncu-*.txt | grep -E "^  [a-z_0-9]+ \(|^    Duration|^    DRAM Throughput|^    Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued" | cut -c1-110
cat "$out/summary.txt"
