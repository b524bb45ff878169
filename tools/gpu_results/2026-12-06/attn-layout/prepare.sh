#!/bin/sh
# The carry of attn-layout's device call: the attention checks, one training step GPU against
# CPU and the bench, before (main at 593591e) and after (this branch), in one call.
#   sh tools/gpu_results/2026-12-06/attn-layout/prepare.sh MAIN_CHECKOUT   (from the worktree)
# MAIN_CHECKOUT is the checkout the device tool sends (/work/main); the carry goes to its
# git-ignored build-attn/carry. "before" is built from a `git archive` of 593591e; "after" from
# a `git archive` of this worktree's HEAD (commit first), both full (plans) and without LLVM
# (what runs there), Release -O2 as tools/gpu_checks.sh builds them.
set -eu
root=$(pwd)
main=${1:?usage: prepare.sh MAIN_CHECKOUT}
b=$main/build-attn
carry=$b/carry
mkdir -p "$b"
build() { # NAME COMMIT: full and runtime builds of COMMIT in $b/NAME; with AFTER_FULL set,
	# after's full build is that folder (the worktree's own build of HEAD, to spare two CPUs)
	rm -rf "$b/$1/src" && mkdir -p "$b/$1"
	git -C "$root" archive --format=tar --prefix=src/ "$2" | tar -x -C "$b/$1"
	if [ "$1" = after ] && [ -n "${AFTER_FULL:-}" ]; then
		rm -rf "$b/$1/full" && ln -s "$AFTER_FULL" "$b/$1/full"
	else
		cmake -S "$b/$1/src" -B "$b/$1/full" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DF8C_WERROR=ON \
			>/dev/null
		cmake --build "$b/$1/full" --target f8c -- -j 2 >/dev/null
	fi
	cmake -S "$b/$1/src" -B "$b/$1/runtime" -DF8C_LLVM=OFF -DCMAKE_BUILD_TYPE=Release \
		-DF8C_WERROR=ON "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" >/dev/null
	cmake --build "$b/$1/runtime" --target f8c -- -j 2 >/dev/null
}
# REUSE_BEFORE=1 keeps an earlier call's build of 593591e (it does not change).
[ "${REUSE_BEFORE:-}" = 1 ] && [ -x "$b/before/runtime/f8c" ] && [ -x "$b/before/full/f8c" ] ||
	build before 593591e
build after HEAD
# The checks: attention_check links the CPU reference kernels (the full build's), test_backend_ops
# writes the op cases as plans, backend_ops_cuda runs them there (the runtime build's).
cmake --build "$b/after/full" --target attention_check test_backend_ops -- -j 2 >/dev/null
cmake --build "$b/after/runtime" --target backend_ops_cuda -- -j 2 >/dev/null

rm -rf "$carry" "$b/plans" && mkdir -p "$carry" "$b/plans/before" "$b/plans/after" "$b/plans/steps"
git -C "$root" rev-parse HEAD >"$carry/commit.txt"
cp "$b/before/runtime/f8c" "$carry/f8c-before"
cp "$b/after/runtime/f8c" "$carry/f8c"
cp "$b/after/full/tests/gpu/attention_check" "$b/after/runtime/tests/gpu/backend_ops_cuda" \
	"$b/after/src/tools/gpu_bench.py" "$b/after/src/tools/gpu_compare.py" \
	"$root/tools/gpu_results/2026-12-06/attn-layout/run-attn.sh" "$carry/"
"$b/after/full/f8c" tokenize "$b/after/src/data/fp8-notes.txt" -o "$carry/tokens.bin" >/dev/null
# gpu_checks.sh's bench and step options, word for word.
bench="--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-decay-iters 1000 --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16 --fp8-format hybrid --fp8-recipe delayed"
for side in before after; do
	while read -r name model batch seq; do
		# shellcheck disable=SC2086 # the options are words
		"$b/$side/full/f8c" compile "$b/$side/src/models/$model.json" -o "$b/plans/$side/$name" \
			$bench --micro-batch-size "$batch" --global-batch-size "$batch" --seq-length "$seq" \
			>"$b/plans/compile-$side-$name.log" 2>&1
	done <<BENCH
gpt2-124m-delayed gpt2-124m 16 1024
gpt-1.3b-delayed gpt-1.3b 8 2048
BENCH
done
train="--micro-batch-size 8 --global-batch-size 8 --seq-length 128 --lr-decay-iters 200 \
--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 --lr-decay-style cosine --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0"
while read -r name options; do
	# shellcheck disable=SC2086
	"$b/after/full/f8c" compile "$b/after/src/models/gpt-tiny.json" -o "$b/plans/steps/$name" \
		$train $options >"$b/plans/compile-$name.log" 2>&1
done <<STEPS
gpt-tiny
gpt-tiny-bf16 --bf16
gpt-tiny-delayed --bf16 --fp8-format hybrid --fp8-recipe delayed
gpt-tiny-delayed-recompute --bf16 --fp8-format hybrid --fp8-recipe delayed --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
gpt-tiny-current-recompute --bf16 --fp8-format hybrid --fp8-recipe current --recompute-granularity selective --recompute-modules core_attn layernorm mlp
STEPS
"$b/after/full/tests/runtime/test_backend_ops" --write-cases "$b/plans/ops" \
	>"$b/plans/backend_ops_write.log" 2>&1 || grep FAIL "$b/plans/backend_ops_write.log" >&2 || true
tar -C "$b/plans" -cJf "$carry/plans.tar.xz" before after steps ops
cp "$main/build-bench/carry/libs.tar.xz" "$carry/"
du -sh "$carry"
