#!/bin/sh
# The README's GPU commands, prepared here and run on the GPU machine, whose output the README
# quotes.
#
#   tools/gpu_readme.sh prepare [FOLDER]   (here; default build-gpu-readme)
#     packs the full build's f8c (the one that compiles models: it links libLLVM, which the GPU
#     machine lacks, so it goes along in a tarball, 27 MB), the build without LLVM,
#     the main job's tokens, and a plan of the main job compiled here, into FOLDER.
#   sh FOLDER/run.sh   (there, from the repository root; the device tool's run: carry
#     ["build-gpu-readme"])
#     runs, as the README gives them: the main job on the GPU (f32, then --bf16 with FP8
#     delayed scaling and --verbose, then with --profile), the plan compiled here trained there
#     by the build without LLVM, and mixtral-tiny --bf16; each command's output in $OUT.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = prepare ] || { echo "usage: tools/gpu_readme.sh prepare [FOLDER]" >&2; exit 2; }
folder=${2:-$root/build-gpu-readme}
case $folder in /*) ;; *) folder=$root/$folder ;; esac

cmake --preset default -DF8C_WERROR=ON >/dev/null
cmake --build "$root/build" --target f8c -- -j 2 >/dev/null
cmake --preset runtime -DF8C_WERROR=ON >/dev/null
cmake --build "$root/build-runtime" --target f8c -- -j 2 >/dev/null

rm -rf "$folder"
mkdir -p "$folder/libs"
cp "$root/build/f8c" "$folder/f8c"
cp "$root/build-runtime/f8c" "$folder/f8c-runtime"
strip "$folder/f8c" "$folder/f8c-runtime" # the debug info would not fit the carry's 64 MiB
# The full build's libraries that the GPU machine (Ubuntu 24.04) lacks: libLLVM 19, z3 (which
# libLLVM links) and protobuf-c; it has the others (libxml2, libffi, libedit, zstd, OpenBLAS,
# jansson, ...), and its C and C++ runtimes are newer.
ldd "$root/build/f8c" | awk '/=>/ { print $3 }' | grep -E '/lib(LLVM|z3|protobuf-c)[.-]' |
	while read -r library; do cp -L "$library" "$folder/libs/"; done
tar -C "$folder/libs" -cf - . | xz -T2 -9 >"$folder/libs.tar.xz"
rm -rf "$folder/libs"
"$root/build/f8c" tokenize "$root/data/fp8-notes.txt" -o "$folder/fp8-notes.bin" >/dev/null
# The main job's options (models/training/gpt-tiny.json) on the command line: a plan records
# its options as given, and takes no --config.
"$root/build/f8c" compile "$root/models/gpt-tiny.json" -o "$folder/plan-gpt-tiny-fp8" \
	--micro-batch-size 8 --global-batch-size 8 --seq-length 128 --lr 3e-3 --min-lr 3e-4 \
	--lr-warmup-iters 10 --lr-decay-iters 250 --lr-decay-style cosine --weight-decay 0.1 \
	--adam-beta2 0.95 --clip-grad 1.0 --seed 1234 --bf16 --fp8-format hybrid \
	>"$folder/compile.log" 2>&1

cat >"$folder/run.sh" <<'RUN'
#!/bin/sh
# Runs on the GPU machine from the repository root (tools/gpu_readme.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out}
mkdir -p "$out" /tmp/f8c-full-libs build
tar -C /tmp/f8c-full-libs -xJf "$here/libs.tar.xz"
export LD_LIBRARY_PATH=/tmp/f8c-full-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cp "$here/f8c" build/f8c
cp "$here/fp8-notes.bin" build/fp8-notes.bin
cp -r "$here/plan-gpt-tiny-fp8" build/
mkdir -p build-runtime && cp "$here/f8c-runtime" build-runtime/f8c
job="--data build/fp8-notes.bin --config models/training/gpt-tiny.json --device cuda"
show() { # NAME COMMAND...: the command and what it printed, into $out/NAME.log
	name=$1
	shift
	{ echo "\$ $*"; "$@" 2>&1; echo "(exit $?)"; } >"$out/$name.log"
	tail -n 4 "$out/$name.log"
}
{
	date -u +%Y-%m-%dT%H:%M:%SZ
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} >"$out/summary.txt"
# shellcheck disable=SC2086 # the job's words
show main-f32 build/f8c train models/gpt-tiny.json $job
# shellcheck disable=SC2086
show main-delayed build/f8c train models/gpt-tiny.json $job --bf16 --fp8-format hybrid \
	--fp8-recipe delayed --verbose
# shellcheck disable=SC2086
show main-profile build/f8c train models/gpt-tiny.json $job --bf16 --fp8-format hybrid \
	--train-iters 20 --profile "$out/profile-gpt-tiny-fp8.json"
show plan build-runtime/f8c train build/plan-gpt-tiny-fp8 --data build/fp8-notes.bin \
	--train-iters 250 --log-interval 50 --device cuda
show mixtral-bf16 build/f8c train models/mixtral-tiny.json --data build/fp8-notes.bin \
	--micro-batch-size 4 --seq-length 64 --train-iters 50 --lr 3e-3 --lr-warmup-iters 5 \
	--log-interval 10 --bf16 --device cuda --verbose
RUN
chmod +x "$folder/run.sh"
relative=${folder#"$root"/}
echo "carried to the GPU machine: $(du -sh "$folder" | cut -f1) in $relative"
echo "there: sh $relative/run.sh   (the device tool's run: carry [\"$relative\"])"
