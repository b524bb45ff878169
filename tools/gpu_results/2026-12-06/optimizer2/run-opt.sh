#!/bin/sh
# The optimizer kernel's A/B (issue 15): ncu of optimizer_0 on the plans named ncu-PLAN, then
# gpu_bench.py on the plans named otherwise. Everything under $OUT/r, packed into $OUT/results.tgz
# (the device tool brings back 8 files at most).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/opt-results
mkdir -p "$out" /tmp/f8c-libs
tar -C /tmp/f8c-libs -xJf "$here/libs.tar.xz"
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; /usr/local/cuda/bin/ncu --version | tail -1; } >>"$out/summary.txt"
for what in "$@"; do
	start=$(date +%s)
	case $what in
	ncu-*)
		plan=${what#ncu-}
		/usr/local/cuda/bin/ncu --kernel-name regex:optimizer --launch-skip 2 --launch-count 1 \
			--section SpeedOfLight --section LaunchStats --section Occupancy \
			--section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
			"$here/f8c" train "$here/bench/$plan" --data "$here/tokens.bin" --train-iters 4 \
			--eval-interval 0 --device cuda --no-cuda-graph >"$out/$what.txt" 2>&1; rc=$?
		echo "== $what"
		grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|L1/TEX Hit|L2 Hit|Warp Cycles Per Issued|Memory Throughput" "$out/$what.txt" | head -12 ;;
	*)
		python3 "$here/gpu_bench.py" "$here/f8c" "$here/bench/$what" "$here/tokens.bin" "/tmp/f8c-bench-$what" >"$out/bench-$what.log" 2>&1; rc=$?
		tail -n 1 "$out/bench-$what.log" >"$out/bench-$what.json" ;;
	esac
	echo "$what: rc $rc in $(($(date +%s) - start)) s" | tee -a "$out/summary.txt"
done
for f in "$out"/bench-*.json; do [ -f "$f" ] && python3 -c "
import json,sys
d=json.load(open('$f'))
opt=[t for t in d.get('top',[]) if 'optimizer' in t['what']]
print('$f'.split('/')[-1], {k: d[k] for k in d if k in ('tokens_per_s','step_ms','profiled_ms_per_step')}, opt)"; done 2>&1
if [ -n "${OUT:-}" ]; then tar -C "$out" -czf "$OUT/results.tgz" . && cp "$out/summary.txt" "$OUT/"; fi
