#!/bin/sh
# Runs on the GPU machine from the carry (prepare.sh): sh run-attn.sh ITEM[@SECONDS]...
# ITEM: attention_check, backend_ops (the op cases, the packed ones among them), step-PLAN
# (gpu_compare.py step on plans/steps/PLAN), before-PLAN and after-PLAN (gpu_bench.py on
# plans/before/PLAN with f8c-before, main at 593591e, and on plans/after/PLAN with f8c, this
# branch); a name given twice runs twice, the second log named -again. @SECONDS: what the item is
# expected to take; it is skipped (and said so) when less than that is left before $DEADLINE
# seconds from the start (default 570). Logs and JSON in /tmp/attn-out, packed into
# $OUT/results.tgz after every item; the summary (device, driver, libraries, each item's time)
# also copied to $OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/attn-out
deadline=${DEADLINE:-570}
start_all=$(date +%s)
mkdir -p "$out" /tmp/f8c-libs /tmp/attn-plans
tar -C /tmp/attn-plans -xJf "$here/plans.tar.xz"
tar -C /tmp/f8c-libs -xJf "$here/libs.tar.xz"
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
{
	echo "== call started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu,clocks.sm,clocks.max.sm,power.limit,pstate --format=csv
	ls /usr/lib/x86_64-linux-gnu/libcudnn.so.* /usr/local/cuda/lib64/libcublasLt.so.* 2>/dev/null | tr '\n' ' '
	echo
	cat "$here/commit.txt"
} >>"$summary"
pack() { [ -n "${OUT:-}" ] && tar -C "$out" -czf "$OUT/results.tgz" . && cp "$summary" "$OUT/"; }
for item in "$@"; do
	what=${item%@*}
	expect=0
	[ "$what" != "$item" ] && expect=${item##*@}
	left=$((deadline - ($(date +%s) - start_all)))
	if [ "$left" -lt "$expect" ]; then
		echo "$what: SKIPPED ($left s left, $expect s expected)" | tee -a "$summary"
		continue
	fi
	log=$out/$what.log
	[ -e "$log" ] && log=$out/$what-again.log
	start=$(date +%s)
	case $what in
	attention_check) timeout "$left" "$here/attention_check" >"$log" 2>&1 ;;
	backend_ops) timeout "$left" "$here/backend_ops_cuda" /tmp/attn-plans/ops >"$log" 2>&1 ;;
	step-*)
		plan=${what#step-}
		timeout "$left" python3 "$here/gpu_compare.py" step "$here/f8c" \
			"/tmp/attn-plans/steps/$plan" "$here/tokens.bin" "/tmp/attn-step-$plan" >"$log" 2>&1 ;;
	before-* | after-*)
		side=${what%%-*}
		plan=${what#*-}
		f8c=$here/f8c
		[ "$side" = before ] && f8c=$here/f8c-before
		rm -rf "/tmp/attn-bench-$what"
		timeout "$left" python3 "$here/gpu_bench.py" "$f8c" "/tmp/attn-plans/$side/$plan" \
			"$here/tokens.bin" "/tmp/attn-bench-$what" >"$log" 2>&1
		rc=$?
		tail -n 1 "$log" >"${log%.log}.json"
		(exit $rc) ;;
	esac
	rc=$?
	echo "$what: rc $rc in $(($(date +%s) - start)) s" | tee -a "$summary"
	pack
done
nvidia-smi --query-gpu=temperature.gpu,clocks.sm,pstate --format=csv,noheader >>"$summary"
echo "== call ended $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start_all)) s" >>"$summary"
pack
# The short version, for the reply's tail.
grep -h "passed\|failed\|FAIL" "$out/attention_check.log" "$out/backend_ops.log" 2>/dev/null | tail -n 8
for f in "$out"/step-*.log; do [ -e "$f" ] && echo "$(basename "$f"): $(tail -n 2 "$f" | tr '\n' ' ')"; done
for f in "$out"/before-*.json "$out"/after-*.json; do
	[ -e "$f" ] || continue
	python3 -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
keys = ('tokens_per_s', 'step_ms', 'profiled_ms_per_step', 'device_peak_gib', 'error')
print(sys.argv[1].split('/')[-1], {k: d[k] for k in keys if k in d},
      {k: round(v * d.get('profiled_ms_per_step', 0), 1) for k, v in d.get('shares', {}).items() if k in ('kernels: layout', 'attention fwd', 'attention bwd')})" "$f" 2>&1
done
cat "$summary"
