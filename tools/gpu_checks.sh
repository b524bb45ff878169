#!/bin/sh
# The CUDA backend's checks on a GPU machine, prepared here and run there.
#
#   tools/gpu_checks.sh prepare [FOLDER]   (here; default build-gpu-checks)
#     builds the f8c that runs plans (-DF8C_LLVM=OFF, with the CUDA backend: libcuda, cuBLASLt
#     and cuDNN are opened at run time) and the GPU check programs, compiles the plans with the
#     full build, tokenizes the data, and packs what the GPU run needs into FOLDER/carry (the
#     host libraries the GPU machine lacks, OpenBLAS and jansson, in a tarball).
#   sh FOLDER/carry/run.sh [modules] [ops] [steps] [sanitize] [resume] [skip] [curves]
#     [curves-gpu] [bench] [convergence] [convergence-more] [memory]   (there; default: all of
#     them but curves-gpu, bench, convergence, convergence-more and memory)
#     runs every check and writes its logs and a summary to $OUT (or ./out): the library
#     modules against the CPU reference (gemm_check, attention_check; nccl_check: NCCL's
#     communicators of one rank), then each plan's first
#     training step on the GPU against the CPU backend on the same machine (tools/gpu_compare.py:
#     the loss, every gradient through AdamW's first moment, and the updated parameters), then
#     the FP8 recipes' 200-iteration loss curves and scaling tables against the CPU's.
#     `resume`: checkpoints GPU -> CPU -> GPU and a bit-exact resume with --deterministic
#     (gpu_compare.py resume, on gpt-tiny --bf16 and FP8 delayed); `skip`: iterations that
#     meet a non-finite loss skipped on the GPU as on the CPU (gpu_compare.py skip);
#     `convergence`: FP8 against --bf16 over 1000 iterations of gpt2-124m on the machine's
#     Python standard library, two seeds each (tools/convergence.py; not part of `all`);
#     `convergence-more`: the same against FP8 current and delayed with TransformerEngine's
#     history of 1024; `memory`: each plan's
#     memory estimate (plan.json's, ir/memory.h) against the device's peak while it trains,
#     with and without recompute, and gpt-1.3b under --memory-budget 60 (tools/memory_check.py);
#     `bench`: tokens/s, peak
#     memory and where the step's time goes for gpt2-124m (16 x 1024) and gpt-1.3b (8 x 2048)
#     in --bf16 and FP8 (tools/gpu_bench.py; not part of `all`: run it alone); `torch` (or
#     `torch-gpt2-124m`, `torch-gpt-1.3b`, one model each): PyTorch's step of the same models
#     (tools/bench_torch.py) in BF16 eager, BF16 under torch.compile and FP8 (torch._scaled_mm,
#     tensorwise) under torch.compile, the baseline bench's figures are set against.
#     `ops`: the backend test table's cases (tests/runtime/test_backend_ops.c, written here as
#     plans by the full build) on the CUDA backend against the CPU reference's stored outputs,
#     then again with F8C_NCCL=1 (the collective cases through NCCL's communicators of one rank),
#     then with the collectives held back on their own stream under CUDA graphs
#     (F8C_OPS_GRAPHS=1 F8C_COMM_DELAY_MS=5: runtime/cuda/backend.c's overlap).
#
# Results go in tools/gpu_checks.md with the date, the device and the library versions.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = prepare ] || { echo "usage: tools/gpu_checks.sh prepare [FOLDER]" >&2; exit 2; }
folder=${2:-$root/build-gpu-checks}
case $folder in /*) ;; *) folder=$root/$folder ;; esac
carry=$folder/carry

# The full build compiles the plans; the runtime build is what runs on the GPU machine.
cmake --preset default -DF8C_WERROR=ON >/dev/null
# The check programs link the CPU reference kernels, not LLVM: they come from the full build.
cmake --build "$root/build" --target f8c gemm_check attention_check -- -j 2 >/dev/null
# It writes the backend test table's cases as plans for the GPU (--write-cases, below).
cmake --build "$root/build" --target test_backend_ops -- -j 2 >/dev/null
cmake -S "$root" -B "$folder/runtime" -DF8C_LLVM=OFF -DCMAKE_BUILD_TYPE=Release -DF8C_WERROR=ON \
	"-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" >/dev/null
cmake --build "$folder/runtime" --target f8c -- -j 2 >/dev/null
# It runs those cases there: it links no LLVM, so the runtime build makes it.
cmake --build "$folder/runtime" --target backend_ops_cuda nccl_check -- -j 2 >/dev/null

rm -rf "$carry"
mkdir -p "$carry/plans"
cp "$folder/runtime/f8c" "$root/build/tests/gpu/gemm_check" "$root/build/tests/gpu/attention_check" \
	"$root/tools/gpu_compare.py" "$root/tools/gpu_bench.py" "$root/tools/bench_torch.py" "$carry/"
mkdir -p "$carry/models"
cp "$root/models/gpt2-124m.json" "$root/models/gpt-1.3b.json" "$carry/models/"
f8c=$root/build/f8c
"$f8c" tokenize "$root/data/fp8-notes.txt" -o "$carry/tokens.bin" >/dev/null
# The backend test table's cases: small graphs, their PTX, leaves and references, 5 MB of
# text and tensors that pack into 2.
cp "$folder/runtime/tests/gpu/backend_ops_cuda" "$folder/runtime/tests/gpu/nccl_check" "$carry/"
rm -rf "$folder/ops"
if ! "$root/build/tests/runtime/test_backend_ops" --write-cases "$folder/ops" \
	>"$folder/backend_ops_write.log" 2>&1; then
	echo "gpu_checks.sh: the backend op cases were not all written ($folder/backend_ops_write.log):" >&2
	grep FAIL "$folder/backend_ops_write.log" >&2 || true
fi
tar -C "$folder" -cJf "$carry/ops.tar.xz" ops

# One plan per case: NAME MODEL OPTIONS... (MODEL: a name in models/, or a path: the exporter
# fixtures' Linears store w (K, N), so their FP8 GEMMs read the other copies and swap wgrad's
# operands; llama-onnx-block failed on the GPU at its export's mask arithmetic, tools/
# gpu_checks.md, 2026-12-06 11:05 UTC; its mask is now proven causal when compiling and
# replaced by the causal flag, which no GPU run has checked yet).
# (--train-iters is the run's: the decay's length is compiled instead.) The learning rate warms
# up over 20 iterations, as every Megatron-LM run does: at 3e-3 from the first step, gpt-tiny's
# FP8 runs spike (rowwise to a loss of 8.3 at step 6 on the CPU, 2026-12-04) and settle on a
# worse trajectory that the smallest rounding difference picks, so that two 200-step curves of
# one plan on two backends would compare chaos, not arithmetic.
train="--micro-batch-size 8 --global-batch-size 8 --seq-length 128 --lr-decay-iters 200 \
--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 --lr-decay-style cosine --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0"
small="--micro-batch-size 4 --global-batch-size 4 --seq-length 64 --lr-decay-iters 200 --lr 3e-3 \
--lr-warmup-iters 20 --clip-grad 1.0"
# mixtral-tiny with every token routed to all 4 experts (top-4): no top-k choice for rounding
# to flip, so its --bf16 step is held to the bf16 tolerance where top-2's cannot be (gpu_compare.py
# step says why).
sed 's/"top_k": 2/"top_k": 4/; s/top-2 of 4/top-4 of 4/' "$root/models/mixtral-tiny.json" \
	>"$folder/mixtral-tiny-top4.json"
while read -r name model options; do
	[ -n "$name" ] || continue
	case $model in /*) path=$model ;; *) path=$root/models/$model.json ;; esac
	# shellcheck disable=SC2086 # the options are words
	if ! "$f8c" compile "$path" -o "$carry/plans/$name" $options \
		>"$carry/plans/$name.log" 2>&1; then
		echo "gpu_checks.sh: $name does not compile:" >&2
		cat "$carry/plans/$name.log" >&2
		rm -rf "$carry/plans/$name"
	fi
done <<PLANS
gpt-tiny gpt-tiny $train
gpt-tiny-bf16 gpt-tiny $train --bf16
gpt-tiny-delayed gpt-tiny $train --bf16 --fp8-format hybrid --fp8-recipe delayed
gpt-tiny-current gpt-tiny $train --bf16 --fp8-format hybrid --fp8-recipe current
gpt-tiny-rowwise gpt-tiny $train --bf16 --fp8-format hybrid --fp8-recipe rowwise
gpt-tiny-block gpt-tiny $train --bf16 --fp8-format hybrid --fp8-recipe block
gpt-tiny-delayed-recompute gpt-tiny $train --bf16 --fp8-format hybrid --fp8-recipe delayed --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
gpt-tiny-current-recompute gpt-tiny $train --bf16 --fp8-format hybrid --fp8-recipe current --recompute-granularity selective --recompute-modules core_attn layernorm mlp
llama-tiny llama-tiny $small
llama-tiny-bf16 llama-tiny $small --bf16
mixtral-tiny mixtral-tiny $small
mixtral-tiny-bf16 mixtral-tiny $small --bf16
minigpt-onnx-current $root/tests/data/onnx/minigpt-tiny/model.onnx $small --bf16 --fp8-format hybrid --fp8-recipe current
llama-onnx-block $root/tests/data/onnx/llama-tiny/model.onnx $small --bf16 --fp8-format hybrid --fp8-recipe block --fp8-head
mixtral-tiny-top4-bf16 $folder/mixtral-tiny-top4.json $small --bf16
PLANS

# The benchmark plans: the models of issue 15's figures, compiled as f8c trains them, and two
# with the vocabulary unpadded (50257 rows: the head's GEMMs on unaligned rows), to show what
# the padding is worth.
mkdir -p "$carry/bench"
bench="--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-decay-iters 1000 --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16"
while read -r name model batch seq options; do
	[ -n "$name" ] || continue
	# shellcheck disable=SC2086 # the options are words
	if ! "$f8c" compile "$root/models/$model.json" -o "$carry/bench/$name" $bench \
		--micro-batch-size "$batch" --global-batch-size "$batch" --seq-length "$seq" $options \
		>"$carry/bench/$name.log" 2>&1; then
		echo "gpu_checks.sh: $name does not compile:" >&2
		cat "$carry/bench/$name.log" >&2
		rm -rf "$carry/bench/$name"
	fi
done <<BENCH
gpt2-124m-bf16 gpt2-124m 16 1024
gpt2-124m-delayed gpt2-124m 16 1024 --fp8-format hybrid --fp8-recipe delayed
gpt2-124m-current gpt2-124m 16 1024 --fp8-format hybrid --fp8-recipe current
gpt-1.3b-bf16 gpt-1.3b 8 2048
gpt-1.3b-delayed gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe delayed
gpt-1.3b-current gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe current
gpt2-124m-bf16-vocab50257 gpt2-124m 16 1024 --make-vocab-size-divisible-by 1
gpt-1.3b-delayed-vocab50257 gpt-1.3b 8 2048 --fp8-format hybrid --fp8-recipe delayed --make-vocab-size-divisible-by 1
BENCH

# `skip`'s plan: gpt-tiny with an untied head (a tied one would read the inf row that
# gpu_compare.py skip puts in every window), FP8 under --bf16; its tokens: the notes with a
# 'Q' after about one byte in 60, so that about a third of the iterations meet it.
mkdir -p "$carry/skip"
python3 - "$root/models/gpt-tiny.json" "$folder/gpt-tiny-untied.json" "$root/data/fp8-notes.txt" \
	"$folder/skip.txt" <<'PY'
import json, random, sys
model = json.load(open(sys.argv[1]))
model["tie_embeddings"] = False
json.dump(model, open(sys.argv[2], "w"))
rng, text = random.Random(60), []
for c in open(sys.argv[3]).read():
    text.append(c + ("Q" if rng.randrange(60) == 0 else ""))
open(sys.argv[4], "w").write("".join(text))
PY
"$f8c" tokenize "$folder/skip.txt" -o "$carry/skip/tokens.bin" >/dev/null
"$f8c" compile "$folder/gpt-tiny-untied.json" -o "$carry/skip/gpt-tiny-untied-delayed" \
	--micro-batch-size 2 --seq-length 16 --lr-decay-iters 22 --bf16 --fp8-format hybrid \
	--fp8-recipe delayed >"$carry/skip/compile.log" 2>&1

# `convergence`'s plans (tools/convergence.py): gpt2-124m as the bench runs it, with GPT-2's
# schedule over 1000 iterations, in --bf16 and FP8; the name's last part is the run's length.
mkdir -p "$carry/convergence"
schedule="--micro-batch-size 16 --global-batch-size 16 --seq-length 1024 --lr 6e-4 --min-lr 6e-5 \
--lr-warmup-iters 100 --lr-decay-iters 1000 --lr-decay-style cosine --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16"
# shellcheck disable=SC2086 # the options are words
"$f8c" compile "$root/models/gpt2-124m.json" -o "$carry/convergence/gpt2-124m-bf16-1000" $schedule \
	>"$carry/convergence/bf16.log" 2>&1
# shellcheck disable=SC2086
"$f8c" compile "$root/models/gpt2-124m.json" -o "$carry/convergence/gpt2-124m-delayed-1000" \
	$schedule --fp8-format hybrid --fp8-recipe delayed >"$carry/convergence/delayed.log" 2>&1
# FP8's convergence gap against --bf16 (2026-12-06: delayed with TransformerEngine's history of
# 1024 3.5% behind at 1000 iterations; with Megatron-LM's history of 1, now f8c's default, and
# under current scaling within two --bf16 runs' noise): the same schedule under current scaling,
# and delayed with the old default, to show what the default's change is worth.
# shellcheck disable=SC2086
"$f8c" compile "$root/models/gpt2-124m.json" -o "$carry/convergence/gpt2-124m-current-1000" \
	$schedule --fp8-format hybrid --fp8-recipe current >"$carry/convergence/current.log" 2>&1
# shellcheck disable=SC2086
"$f8c" compile "$root/models/gpt2-124m.json" -o "$carry/convergence/gpt2-124m-history1024-1000" \
	$schedule --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 \
	--fp8-amax-compute-algo max >"$carry/convergence/history1024.log" 2>&1
cp "$root/tools/convergence.py" "$carry/"

# `memory`'s plans (tools/memory_check.py, issue 18): the bench models with and without full
# recompute, in --bf16 and FP8, and gpt-1.3b at micro-batch 16 under --memory-budget 60 (the
# name's -budgetN is the budget the check holds its peak to).
mkdir -p "$carry/memory"
memory="--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-decay-iters 1000 --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0 --bf16 --weights seed"
full="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
while read -r name model batch seq options; do
	[ -n "$name" ] || continue
	# shellcheck disable=SC2086 # the options are words
	if ! "$f8c" compile "$root/models/$model.json" -o "$carry/memory/$name" $memory \
		--micro-batch-size "$batch" --global-batch-size "$batch" --seq-length "$seq" $options \
		>"$carry/memory/$name.log" 2>&1; then
		echo "gpu_checks.sh: $name does not compile:" >&2
		cat "$carry/memory/$name.log" >&2
		rm -rf "$carry/memory/$name"
	fi
done <<MEMORY
gpt2-124m-bf16 gpt2-124m 16 1024
gpt2-124m-bf16-full gpt2-124m 16 1024 $full
gpt2-124m-delayed gpt2-124m 16 1024 --fp8-format hybrid
gpt2-124m-delayed-full gpt2-124m 16 1024 --fp8-format hybrid $full
gpt-1.3b-bf16 gpt-1.3b 8 2048
gpt-1.3b-bf16-full gpt-1.3b 8 2048 $full
gpt-1.3b-delayed gpt-1.3b 8 2048 --fp8-format hybrid
gpt-1.3b-delayed-full gpt-1.3b 8 2048 --fp8-format hybrid $full
gpt-1.3b-delayed-mb16-budget60 gpt-1.3b 16 2048 --fp8-format hybrid --memory-budget 60
MEMORY
cp "$root/tools/memory_check.py" "$carry/"

cp /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 /lib/x86_64-linux-gnu/libjansson.so.4 \
	/lib/x86_64-linux-gnu/libgfortran.so.5 /lib/x86_64-linux-gnu/libquadmath.so.0 "$folder/"
tar -C "$folder" -cJf "$carry/libs.tar.xz" libopenblas.so.0 libjansson.so.4 libgfortran.so.5 \
	libquadmath.so.0

# The plans' folders in one tarball (their JSON and PTX compress about 30 times): the device tool
# carries 64 MiB at most, and they come to 58 MB. run.sh unpacks them in place.
packed=
for folder_name in plans bench memory convergence; do
	[ -d "$carry/$folder_name" ] && packed="$packed $folder_name"
done
# shellcheck disable=SC2086 # the folders' names are words
tar -C "$carry" -cJf "$carry/plans.tar.xz" $packed # set -e stops here if it fails
(cd "$carry" && rm -rf $packed)

cat >"$carry/run.sh" <<'RUN'
#!/bin/sh
# Runs on the GPU machine, from the folder that holds carry/ (tools/gpu_checks.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out}
mkdir -p "$out" /tmp/f8c-libs
tar -C /tmp/f8c-libs -xJf "$here/libs.tar.xz"
# plans/, bench/, memory/, convergence/ (a carry made by gpu_ab.sh has its plans unpacked)
if [ -f "$here/plans.tar.xz" ] && ! tar -C "$here" -xJf "$here/plans.tar.xz"; then
	echo "run.sh: the plans could not be unpacked in $here" >&2
	exit 1
fi
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
{
	date -u +%Y-%m-%dT%H:%M:%SZ
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	ls /usr/lib/x86_64-linux-gnu/libcudnn.so.* /usr/local/cuda/lib64/libcublasLt.so.* 2>/dev/null |
		tr '\n' ' '
	echo
} >"$summary"
check() { # NAME COMMAND...: runs it, logs it, one line in the summary (sh has no locals:
	# the variables are check_*, so that a caller's $name survives)
	check_name=$1
	shift
	check_start=$(date +%s)
	if "$@" >"$out/$check_name.log" 2>&1; then check_result=passed; else check_result="FAILED ($?)"; fi
	echo "$check_name: $check_result in $(($(date +%s) - check_start)) s" >>"$summary"
}
# The arguments: what to run (modules ops steps sanitize resume skip curves curves-gpu bench
# convergence torch torch-MODEL; default all but curves-gpu, bench, convergence and torch), so
# that a short lease can split them.
want=" ${*:-all} "
runs() { [ "$want" = " all " ] || case $want in *" $1 "*) true ;; *) false ;; esac; }
if runs modules; then
	check gemm_check "$here/gemm_check"
	check attention_check "$here/attention_check"
	check nccl_check "$here/nccl_check"
fi
if runs ops; then
	rm -rf /tmp/f8c-ops && mkdir -p /tmp/f8c-ops && tar -C /tmp/f8c-ops -xJf "$here/ops.tar.xz"
	check backend_ops "$here/backend_ops_cuda" /tmp/f8c-ops/ops
	# The collective cases again, through NCCL's communicators of one rank.
	check backend_ops_nccl env F8C_NCCL=1 "$here/backend_ops_cuda" /tmp/f8c-ops/ops
	# And on the communication stream with each collective held back 5 ms, every case run as
	# issued, captured and replayed as a CUDA graph: a wait the compute stream misses reads
	# what the collective has not written yet, and the case fails.
	check backend_ops_overlap env F8C_NCCL=1 F8C_OPS_GRAPHS=1 F8C_COMM_DELAY_MS=5 \
		"$here/backend_ops_cuda" /tmp/f8c-ops/ops
fi
runs steps && for plan in "$here"/plans/*/; do
	name=$(basename "$plan")
	check "step-$name" python3 "$here/gpu_compare.py" step "$here/f8c" "$plan" "$here/tokens.bin" \
		"/tmp/f8c-$name"
done
# `sanitize`: compute-sanitizer on one FP8 step (gpt-tiny --bf16, delayed; eager, so that each
# report names its kernel): memcheck; racecheck over every kernel, each hazard printed; and
# racecheck over all but cuDNN's, whose warp-specialized flash-attention kernels it reports
# (their wgmma and TMA stages synchronize through mbarriers, which racecheck's shared-memory
# model does not follow; cuDNN is not ours to change).
if runs sanitize; then
	sanitizer=/usr/local/cuda/bin/compute-sanitizer
	one="$here/f8c train $here/plans/gpt-tiny-delayed --data $here/tokens.bin --train-iters 1 \
--eval-interval 0 --device cuda --no-cuda-graph"
	# shellcheck disable=SC2086 # the command's words
	check sanitize-memcheck "$sanitizer" --tool memcheck --error-exitcode 1 $one
	# shellcheck disable=SC2086
	check sanitize-racecheck "$sanitizer" --tool racecheck --print-limit 10000 \
		--error-exitcode 1 $one
	# shellcheck disable=SC2086
	check sanitize-racecheck-but-cudnn "$sanitizer" --tool racecheck --print-limit 10000 \
		--kernel-name-exclude kns=cudnn --error-exitcode 1 $one
fi
runs resume && for plan in gpt-tiny-bf16 gpt-tiny-delayed; do
	[ -d "$here/plans/$plan" ] || continue
	check "resume-$plan" python3 "$here/gpu_compare.py" resume "$here/f8c" "$here/plans/$plan" \
		"$here/tokens.bin" "/tmp/f8c-resume-$plan"
done
[ "$want" != " all " ] && runs bench && for plan in "$here"/bench/*/; do
	name=$(basename "$plan")
	check "bench-$name" python3 "$here/gpu_bench.py" "$here/f8c" "$plan" "$here/tokens.bin" \
		"/tmp/f8c-bench-$name"
	tail -n 1 "$out/bench-$name.log" >"$out/bench-$name.json" # gpu_bench.py's last line
done
# `torch`: PyTorch's baselines of the bench models, each mode a process of its own.
for model in gpt2-124m gpt-1.3b; do
	[ "$want" != " all " ] && { runs torch || runs "torch-$model"; } || continue
	case $model in gpt2-124m) shape="--batch 16 --seq 1024" ;; *) shape="--batch 8 --seq 2048" ;; esac
	for mode in bf16-eager bf16-compile fp8-compile; do
		# shellcheck disable=SC2086 # the shape's words
		check "torch-$model-$mode" python3 "$here/bench_torch.py" "$here/models/$model.json" \
			"$here/tokens.bin" $shape --mode "$mode" --out "$out/torch-$model-$mode.json"
	done
done
# `curves-gpu`: the GPU half of curves alone (gpu_compare.py curve-gpu), into $out/curve-RECIPE/,
# for `gpu_compare.py curve-against` here: the device machine's CPU takes minutes per recipe.
[ "$want" != " all " ] && runs curves-gpu && for recipe in delayed current rowwise block; do
	plan=$here/plans/gpt-tiny-$recipe
	[ -d "$plan" ] || continue
	check "curve-gpu-$recipe" python3 "$here/gpu_compare.py" curve-gpu "$here/f8c" "$plan" \
		"$here/tokens.bin" "$out/curve-$recipe"
	rm -rf "$out/curve-$recipe/cuda" "$out/curve-$recipe/cuda.jsonl"
done
# `skip`: iterations that meet a non-finite loss, skipped on the GPU as on the CPU.
runs skip && check skip python3 "$here/gpu_compare.py" skip "$here/f8c" \
	"$here/skip/gpt-tiny-untied-delayed" "$here/skip/tokens.bin" /tmp/f8c-skip
# `convergence`: FP8 (delayed, f8c's default) against --bf16 over 1000 iterations of gpt2-124m
# on the machine's Python standard library, two seeds each (not part of `all`: about 5 minutes).
if [ "$want" != " all " ] && runs convergence; then
	stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
	check convergence python3 "$here/convergence.py" "$here/f8c" "$stdlib" "$out/convergence" \
		--seeds 2 "$here/convergence/gpt2-124m-bf16-1000" \
		"$here/convergence/gpt2-124m-delayed-1000"
fi
# `memory`: the plans' memory estimates against the device's peak (not part of `all`).
[ "$want" != " all " ] && runs memory && check memory python3 "$here/memory_check.py" \
	"$here/f8c" "$here/tokens.bin" "$out/memory" "$here"/memory/*/
# `convergence-more`: current scaling and delayed with TransformerEngine's history (1024, max)
# against --bf16, over the same 1000 iterations, one seed (not part of `all`: about 4 minutes).
if [ "$want" != " all " ] && runs convergence-more; then
	stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
	check convergence-more python3 "$here/convergence.py" "$here/f8c" "$stdlib" \
		"$out/convergence-more" "$here/convergence/gpt2-124m-bf16-1000" \
		"$here/convergence/gpt2-124m-current-1000" \
		"$here/convergence/gpt2-124m-history1024-1000"
fi
runs curves && for recipe in delayed current rowwise block; do
	plan=$here/plans/gpt-tiny-$recipe
	[ -d "$plan" ] || continue
	check "curve-$recipe" python3 "$here/gpu_compare.py" curve "$here/f8c" "$plan" \
		"$here/tokens.bin" "/tmp/f8c-curve-$recipe"
done
cat "$summary"
RUN
chmod +x "$carry/run.sh"
relative=${carry#"$root"/}
echo "carried to the GPU machine: $(du -sh "$carry" | cut -f1) in $relative"
echo "there: sh $relative/run.sh   (the device tool's run: carry [\"$relative\"], timeout_s 600)"
