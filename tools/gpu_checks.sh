#!/bin/sh
# The CUDA backend's checks on a GPU machine, prepared here and run there.
#
#   tools/gpu_checks.sh prepare [FOLDER]   (here; default build-gpu-checks)
#     builds the f8c that runs plans (-DF8C_LLVM=OFF, with the CUDA backend: libcuda, cuBLASLt
#     and cuDNN are opened at run time) and the GPU check programs, compiles the plans with the
#     full build, tokenizes the data, and packs what the GPU run needs into FOLDER/carry (the
#     host libraries the GPU machine lacks, OpenBLAS and jansson, in a tarball).
#   sh FOLDER/carry/run.sh [modules|steps|curves]   (there; default: all of them)
#     runs every check and writes its logs and a summary to $OUT (or ./out): the library
#     modules against the CPU reference (gemm_check, attention_check), then each plan's first
#     training step on the GPU against the CPU backend on the same machine (tools/gpu_compare.py:
#     the loss, every gradient through AdamW's first moment, and the updated parameters), then
#     the FP8 recipes' 200-iteration loss curves and scaling tables against the CPU's.
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
cmake -S "$root" -B "$folder/runtime" -DF8C_LLVM=OFF -DCMAKE_BUILD_TYPE=Release -DF8C_WERROR=ON \
	"-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" >/dev/null
cmake --build "$folder/runtime" --target f8c -- -j 2 >/dev/null

rm -rf "$carry"
mkdir -p "$carry/plans"
cp "$folder/runtime/f8c" "$root/build/tests/gpu/gemm_check" "$root/build/tests/gpu/attention_check" \
	"$root/tools/gpu_compare.py" "$carry/"
f8c=$root/build/f8c
"$f8c" tokenize "$root/data/fp8-notes.txt" -o "$carry/tokens.bin" >/dev/null

# One plan per case: NAME MODEL OPTIONS...
# (--train-iters is the run's: the decay's length is compiled instead.)
train="--micro-batch-size 8 --global-batch-size 8 --seq-length 128 --lr-decay-iters 200 \
--lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --weight-decay 0.1 \
--adam-beta2 0.95 --clip-grad 1.0"
small="--micro-batch-size 4 --global-batch-size 4 --seq-length 64 --lr-decay-iters 200 --lr 3e-3 \
--clip-grad 1.0"
while read -r name model options; do
	[ -n "$name" ] || continue
	# shellcheck disable=SC2086 # the options are words
	if ! "$f8c" compile "$root/models/$model.json" -o "$carry/plans/$name" $options \
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
llama-tiny llama-tiny $small
llama-tiny-bf16 llama-tiny $small --bf16
mixtral-tiny mixtral-tiny $small
mixtral-tiny-bf16 mixtral-tiny $small --bf16
PLANS

cp /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 /lib/x86_64-linux-gnu/libjansson.so.4 \
	/lib/x86_64-linux-gnu/libgfortran.so.5 /lib/x86_64-linux-gnu/libquadmath.so.0 "$folder/"
tar -C "$folder" -cJf "$carry/libs.tar.xz" libopenblas.so.0 libjansson.so.4 libgfortran.so.5 \
	libquadmath.so.0

cat >"$carry/run.sh" <<'RUN'
#!/bin/sh
# Runs on the GPU machine, from the folder that holds carry/ (tools/gpu_checks.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out}
mkdir -p "$out" /tmp/f8c-libs
tar -C /tmp/f8c-libs -xJf "$here/libs.tar.xz"
export LD_LIBRARY_PATH=/tmp/f8c-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
{
	date -u +%Y-%m-%dT%H:%M:%SZ
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	ls /usr/lib/x86_64-linux-gnu/libcudnn.so.* /usr/local/cuda/lib64/libcublasLt.so.* 2>/dev/null |
		tr '\n' ' '
	echo
} >"$summary"
check() { # NAME COMMAND...: runs it, logs it, one line in the summary
	name=$1
	shift
	start=$(date +%s)
	if "$@" >"$out/$name.log" 2>&1; then result=passed; else result="FAILED ($?)"; fi
	echo "$name: $result in $(($(date +%s) - start)) s" >>"$summary"
}
# $1: what to run (modules, steps, curves; default all), so that a short lease can split them.
want=${1:-all}
runs() { [ "$want" = all ] || [ "$want" = "$1" ]; }
if runs modules; then
	check gemm_check "$here/gemm_check"
	check attention_check "$here/attention_check"
fi
runs steps && for plan in "$here"/plans/*/; do
	name=$(basename "$plan")
	check "step-$name" python3 "$here/gpu_compare.py" step "$here/f8c" "$plan" "$here/tokens.bin" \
		"/tmp/f8c-$name"
done
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
