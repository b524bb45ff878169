#!/bin/sh
# There (the device machine), from the carry: the backend op cases and gpt-tiny's steps
# against the CPU (run.sh ops steps), then each bench plan before and after, in turn
# (gpu_bench.py: tokens/s, the profile). Results under $OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out}
mkdir -p "$out"
start=$(date +%s)
sh "$here/run.sh" ops steps
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/reduce && tar -C /tmp/reduce -xJf "$here/bench.tar.xz"
for name in gpt-1.3b-delayed gpt-1.3b-bf16 gpt2-124m-delayed gpt2-124m-bf16; do
	for side in before after; do
		# 45 s a plan at most: stop where the call would end before the results came back.
		[ $(($(date +%s) - start)) -lt 520 ] || { echo "$side-$name: skipped (time)" >>"$out/summary.txt"; continue; }
		python3 "$here/gpu_bench.py" "$here/f8c" "/tmp/reduce/bench/$side-$name" "$here/tokens.bin" \
			"/tmp/reduce/work-$side-$name" >"$out/bench-$side-$name.log" 2>&1
		cp "/tmp/reduce/work-$side-$name/bench.json" "$out/bench-$side-$name.json" 2>/dev/null
		echo "$side-$name: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['tokens_per_s'], 'tokens/s', d['step_ms'], 'ms')" "$out/bench-$side-$name.json" 2>/dev/null)" >>"$out/summary.txt"
	done
done
