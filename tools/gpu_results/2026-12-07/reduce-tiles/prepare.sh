#!/bin/sh
# The carry of one device call that measures the bias gradients' reduce kernels by tiles
# (codegen/lower_reduce.c) against the block-per-column form before it, side by side, with the
# GPU checks that hold the new kernels to the CPU reference.
#   sh tools/gpu_results/2026-12-07/reduce-tiles/prepare.sh BEFORE AFTER_F8C GPU_CHECKS CARRY
# BEFORE: a folder of the bench plans below (gpt2-124m-bf16 ...) compiled with these options by
# the compiler before the change (2026-12-07: build/f8c at 3d9cb1b, before the change was
# built); AFTER_F8C: the full build's f8c with the change, which compiles the same plans here
# (the same runtime runs both: only their kernels differ); GPU_CHECKS: a folder that
# `tools/gpu_checks.sh prepare` made with the after compiler (its runtime f8c, backend_ops_cuda
# and the op cases, the libraries, gpt-tiny's step plans); CARRY: an ignored folder of the
# checkout, which the device tool carries.
set -eu
before=$1 after=$2 checks=$3 carry=$4
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
rm -rf "$carry" && mkdir -p "$carry/plans" "$carry/bench"
cp "$checks/carry/f8c" "$checks/carry/backend_ops_cuda" "$checks/carry/ops.tar.xz" \
	"$checks/carry/libs.tar.xz" "$checks/carry/run.sh" "$checks/carry/gpu_compare.py" \
	"$checks/carry/gpu_bench.py" "$checks/carry/tokens.bin" "$here/run-reduce.sh" "$carry/"
for plan in gpt-tiny gpt-tiny-bf16 gpt-tiny-delayed gpt-tiny-current; do
	cp -r "$checks/carry/plans/$plan" "$carry/plans/"
done
# gpu_checks.sh's bench options, word for word.
bench="--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-decay-iters 1000 --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16"
while read -r name model batch seq options; do
	[ -n "$name" ] || continue
	cp -r "$before/$name" "$carry/bench/before-$name"
	# shellcheck disable=SC2086 # the options are words
	"$after" compile "$root/models/$model.json" -o "$carry/bench/after-$name" $bench \
		--micro-batch-size "$batch" --global-batch-size "$batch" --seq-length "$seq" \
		$options >"$carry/bench/after-$name.log" 2>&1
done <<BENCH
gpt2-124m-bf16 gpt2-124m 16 1024
gpt2-124m-delayed gpt2-124m 16 1024 --fp8-format hybrid --fp8-recipe delayed
gpt-1.3b-bf16 gpt-1.3b 8 2048
gpt-1.3b-delayed gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe delayed
BENCH
tar -C "$carry" -cJf "$carry/bench.tar.xz" bench && rm -rf "$carry/bench"
du -sh "$carry"
