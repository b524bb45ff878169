#!/bin/sh
# Runs on the GPU machine, from the folder that holds it (the carry prepare.sh made).
#   sh run-bench.sh ITEM[@SECONDS]...
# ITEM: f8c-PLAN (tools/gpu_bench.py on bench/PLAN; its --profile JSON kept as
# profile-PLAN.json), alone-PLAN (tests/gpu/step_alone on bench/PLAN, then tools/step_alone.py
# against profile-PLAN.json when that exists), or torch-MODEL-MODE (tools/bench_torch.py, as
# gpu_checks.sh's run.sh `torch` runs it). @SECONDS: what the item is expected to take; it is
# skipped (and said so) when less than that is left before $DEADLINE seconds from the start
# (default 570), so that a call ends inside the device tool's 600 s with its results. Logs and
# JSON go to /tmp/bench-out, packed into $OUT/results.tgz after every item (two files come
# back: the device tool returns at most 8); the summary (date, device, driver, libraries,
# versions, each item's time) is also copied to $OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/bench-out
deadline=${DEADLINE:-570}
start_all=$(date +%s)
mkdir -p "$out" /tmp/f8c-libs
[ -d "$here/bench" ] || tar -C "$here" -xJf "$here/bench.tar.xz"
tar -C /tmp/f8c-libs -xJf "$here/libs.tar.xz"
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
{
	echo "== call started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu,clocks.sm,clocks.max.sm,power.limit,pstate --format=csv
	ls /usr/lib/x86_64-linux-gnu/libcudnn.so.* /usr/local/cuda/lib64/libcublasLt.so.* 2>/dev/null | tr '\n' ' '
	echo
	python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "triton", triton.__version__)' 2>&1
	/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1
	cat "$here/commit.txt" 2>/dev/null
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
	start=$(date +%s)
	case $what in
	f8c-*)
		plan=${what#f8c-}
		log=$out/bench-$plan.log
		[ -e "$log" ] && log=$out/bench-$plan-again.log # a rerun in the same call keeps both
		timeout "$left" python3 "$here/gpu_bench.py" "$here/f8c" "$here/bench/$plan" \
			"$here/tokens.bin" "/tmp/f8c-bench-$plan" >"$log" 2>&1
		rc=$?
		tail -n 1 "$log" >"${log%.log}.json"
		profile=$out/profile-$plan.json
		[ -e "$profile" ] && profile=$out/profile-$plan-again.json
		cp "/tmp/f8c-bench-$plan/profile.json" "$profile" 2>/dev/null ;;
	alone-*)
		plan=${what#alone-}
		name=alone-$plan
		[ -e "$out/$name.jsonl" ] && name=alone-$plan-again
		timeout "$left" "$here/step_alone" "$here/bench/$plan" 30 >"$out/$name.jsonl" \
			2>"$out/$name.log"
		rc=$?
		if [ -e "$out/profile-$plan.json" ]; then
			python3 "$here/step_alone.py" "$out/profile-$plan.json" "$out/$name.jsonl" \
				"$out/parts-${name#alone-}.json" >"$out/parts-${name#alone-}.md" 2>&1
		fi ;;
	torch-*)
		rest=${what#torch-}
		case $rest in
		gpt2-124m-*) model=gpt2-124m shape="--batch 16 --seq 1024" ;;
		gpt-1.3b-*) model=gpt-1.3b shape="--batch 8 --seq 2048" ;;
		esac
		mode=${rest#"$model"-}
		# shellcheck disable=SC2086 # the shape's words
		timeout "$left" python3 "$here/bench_torch.py" "$here/models/$model.json" "$here/tokens.bin" \
			$shape --mode "$mode" --out "$out/$what.json" >"$out/$what.log" 2>&1
		rc=$? ;;
	esac
	echo "$what: rc $rc in $(($(date +%s) - start)) s" | tee -a "$summary"
	pack
done
nvidia-smi --query-gpu=temperature.gpu,clocks.sm,pstate --format=csv,noheader >>"$summary"
echo "== call ended $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start_all)) s" >>"$summary"
pack
# The figures, short, for the reply's tail.
for f in "$out"/bench-*.json "$out"/torch-*.json; do
	python3 -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
keys = ('tokens_per_s', 'step_ms', 'device_peak_gib', 'device_used_gib', 'first_step_s', 'error')
print(sys.argv[1].split('/')[-1], {k: d[k] for k in keys if k in d})" "$f" 2>&1
done
cat "$out"/parts-*.md 2>/dev/null
cat "$summary"
