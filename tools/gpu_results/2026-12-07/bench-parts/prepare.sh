#!/bin/sh
# The carry of one device call that measures issue 15's figures on the committed HEAD: the
# bench plans and what gpu_checks.sh's `bench` and `torch` read (as 2026-12-06/bench/prepare.sh
# makes them), and tests/gpu/step_alone (each GEMM alone, a device copy, the groups' bytes), all
# built from a `git archive` of HEAD in build-b15/src, so that neither build/ nor uncommitted
# edits are used.
#   sh tools/gpu_results/2026-12-07/bench-parts/prepare.sh [CARRY]   (from the repository's root)
# CARRY (default build-b15/carry) must be a folder the device tool carries: inside the
# checkout it sends, ignored by git (/build-*/ is).
set -eu
root=$(pwd)
here=$root/tools/gpu_results/2026-12-07/bench-parts
b=$root/build-b15
carry=${1:-$b/carry}
rm -rf "$b/src" && mkdir -p "$b" && git archive --format=tar --prefix=src/ HEAD | tar -x -C "$b"

cmake -S "$b/src" -B "$b/full" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DF8C_WERROR=ON >/dev/null
nice -n 10 cmake --build "$b/full" --target f8c -- -j 2 >/dev/null
cmake -S "$b/src" -B "$b/runtime" -DF8C_LLVM=OFF -DCMAKE_BUILD_TYPE=Release -DF8C_WERROR=ON \
	"-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" >/dev/null
nice -n 10 cmake --build "$b/runtime" --target f8c step_alone -- -j 2 >/dev/null
rm -rf "$carry" && mkdir -p "$carry/models"
git rev-parse HEAD >"$carry/commit.txt"
cp "$b/runtime/f8c" "$b/runtime/tests/gpu/step_alone" "$b/src/tools/gpu_bench.py" \
	"$b/src/tools/bench_torch.py" "$b/src/tools/step_alone.py" "$here/run-bench.sh" "$carry/"
cp "$b/src/models/gpt2-124m.json" "$b/src/models/gpt-1.3b.json" "$carry/models/"
"$b/full/f8c" tokenize "$b/src/data/fp8-notes.txt" -o "$carry/tokens.bin" >/dev/null
# gpu_checks.sh's bench options, word for word.
bench="--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-decay-iters 1000 --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16"
rm -rf "$b/plans" && mkdir -p "$b/plans/bench"
while read -r name model batch seq options; do
	[ -n "$name" ] || continue
	# shellcheck disable=SC2086 # the options are words
	"$b/full/f8c" compile "$b/src/models/$model.json" -o "$b/plans/bench/$name" $bench \
		--micro-batch-size "$batch" --global-batch-size "$batch" --seq-length "$seq" $options \
		>"$b/plans/compile-$name.log" 2>&1
done <<BENCH
gpt2-124m-bf16 gpt2-124m 16 1024
gpt2-124m-delayed gpt2-124m 16 1024 --fp8-format hybrid --fp8-recipe delayed
gpt2-124m-current gpt2-124m 16 1024 --fp8-format hybrid --fp8-recipe current
gpt-1.3b-bf16 gpt-1.3b 8 2048
gpt-1.3b-delayed gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe delayed
gpt-1.3b-current gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe current
BENCH
# Packed: the plans' PTX is text, and the carry shares 64 MiB with the tracked files.
tar -C "$b/plans" -cJf "$carry/bench.tar.xz" bench
cp /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 /lib/x86_64-linux-gnu/libjansson.so.4 \
	/lib/x86_64-linux-gnu/libgfortran.so.5 /lib/x86_64-linux-gnu/libquadmath.so.0 "$b/"
tar -C "$b" -cJf "$carry/libs.tar.xz" libopenblas.so.0 libjansson.so.4 libgfortran.so.5 \
	libquadmath.so.0
du -sh "$carry"
