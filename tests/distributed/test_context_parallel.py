#!/usr/bin/env python3
"""Context parallelism on the CPU with MPI (issue 16), against the single-rank run:

(a) the plan: `f8c dump-ir --after shard` of gpt-tiny under CP2 feeds every rank the whole
    batch and takes its two chunks of the sequence (LocalShard {balanced=1} of the tokens and
    the labels), looks the learned position table up by the rank's positions, runs every
    Attention as RingAttention over cp, makes the loss the ranks' token losses summed over cp
    over their count summed over cp, and sums the gradients over cp;
(b) gpt-tiny (a learned position table) and llama-tiny (GQA, SwiGLU, RoPE, whose cos and sin
    tables are sharded the same way; FP8 on llama-tiny alone), 2 ranks under mpirun, 10 steps
    on the same global batch,
    data and seed as one rank: in f32 each step's loss and gradient norm within 1e-5 (only the
    order of the sums differs: ring attention merges the key blocks' partial results, and the
    gradients are the two ranks' tokens' terms added by the all-reduce); in BF16 with FP8
    (delayed and current scaling) within 3e-3 for the loss and 2e-2 for the gradient norm, as
    tensor parallelism's test (each BF16 rounding of a differently ordered sum moves the FP8
    casts after it; current scaling takes each rank's own tokens' amax, as TransformerEngine's
    does);
(c) --check-weight-hash-across-dp-replicas-interval 1: the two ranks hold the same bits of
    every parameter, moment, and delayed scaling's scales and amax histories at every
    iteration (the amaxes are max-reduced over cp): every rank's scale_inv of a tensor is the
    same;
(d) TP2 x CP2 with sequence parallelism (4 ranks), llama-tiny in f32 within (b)'s tolerance
    of one rank, and gpt-tiny under TP2 x CP2 with sequence parallelism (its
    position table's rows taken over cp, then over tp); CP2 with selective recompute (each
    ring made again in the backward); CP2 x DP2 with the distributed optimizer (the gradients
    summed over cp+dp, AdamW's state split over them, as Megatron-LM's), and its checkpoint
    resumed on one rank; mixtral-tiny under CP2 (each rank routes its own tokens:
    Megatron-LM's dropless dispatch is token by token), 4 steps in f32 within (b)'s tolerance;
(e) checkpoints: CP2's resumes on one rank and one rank's under CP2, iterations 3-4 within (b)'s
    tolerance of the uninterrupted run;
(f) what cannot be is refused, naming it: a sequence 2 x CP does not divide, a model that mixes
    tokens along the sequence other than by attention (a CumSum).

Usage: test_context_parallel.py F8C SOURCE_DIR [--sanitizer-build]
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402
from ranks import (PRECISIONS, SIZES, SKIP, STEPS, close, compare, losses,  # noqa: E402
                   run, setup, tokenize)

CP2 = ["--context-parallel-size", "2"]
# A model whose tokens see the ones before them through a running sum: no ring can split it.
MIXES = """graph "mixes" {
  input %tokens : i64[batch, seq]
  param %embed.weight : f32[16, 8]
  param %head.weight : f32[16, 8]
  %embed : f32[batch, seq, 8] = Embedding(%tokens, %embed.weight)
  %mixed : f32[batch, seq, 8] = CumSum(%embed) {axis=1}
  %logits : f32[batch, seq, 16] = Linear(%mixed, %head.weight)
  output %logits
}
"""


def plan(binary, source, env):
    """(a) What the pass splits, as dump-ir prints it."""
    model = os.path.join(source, "models", "gpt-tiny.json")
    dumped = run([binary, "dump-ir", model, "--after", "shard", "--world-size", "2",
                  "--target", "cpu", "--report", "--dim", "batch=2", "--dim", "seq=64"] + CP2,
                 env)
    if not check(dumped.returncode == 0, "dump-ir --after shard under CP2",
                 dumped.stderr[-1500:]):
        return
    ir, report = dumped.stdout, dumped.stderr
    check("context-parallel: the sequence of 64 tokens in 2 x CP = 4 chunks over cp, rank r "
          "holding chunks r and 3 - r (causal load balancing); 4 Attention as RingAttention"
          in report, "the report says how the sequence is split", report[-1500:])
    check('%tokens.cp : i64[2, 32] <shard=cp:1> = LocalShard(%tokens) {group="cp", axis=1, '
          'ranks=2, balanced=1}' in ir, "each rank takes its two chunks of the whole tokens")
    check('%labels.cp : i64[2, 32] <shard=cp:1> = LocalShard(%labels) {group="cp", axis=1, '
          'ranks=2, balanced=1}' in ir, "and of the whole labels")
    check("= Embedding(%cp.positions_whole.cp, %pos_embed.weight) {vocab=128}" in ir and
          "Slice(%pos_embed.weight)" not in ir,
          "the position table is looked up by the rank's positions, not sliced")
    rings = [l for l in ir.splitlines() if "= RingAttention(" in l and 'group="cp"' in l]
    grads = [l for l in ir.splitlines() if "= RingAttentionGrad(" in l]
    check(len(rings) == 4 and len(grads) == 4 and "= Attention(" not in ir,
          "every Attention runs as RingAttention over cp, its gradient as RingAttentionGrad",
          f"{len(rings)} forward, {len(grads)} backward")
    check("= CrossEntropy(%logits, %labels.cp) {ignore_index=-100, reduction=\"sum\"}" in ir and
          "%loss.sum : f32[], %loss.tokens : f32[] = AllReduce(%loss.partial, "
          '%loss.tokens.partial) {group="cp", op="sum"}' in ir and
          "%loss : f32[] = Div(%loss.sum, %loss.tokens_at_least_one)" in ir,
          "the loss is the ranks' token losses summed over cp over their count summed over cp")
    check('{group="cp", op="sum"} scope="optimizer" phase=opt' in ir,
          "the gradients are summed over cp")



def main():
    s = setup(sys.argv)
    if not s:
        return SKIP
    binary, source, sanitizer, mpirun = s.binary, s.source, s.sanitizer, s.mpirun
    env, single_env = s.env, s.single_env
    four = ["mpirun", "-np", "4", "--oversubscribe", binary]
    plan(binary, source, single_env)
    with tempfile.TemporaryDirectory() as work:
        data = tokenize(s, work)
        if not data:
            return finish()
        # (b), (c) CP2 against one rank (the sanitizer build: gpt-tiny in f32).
        for name in ("gpt-tiny",) if sanitizer else ("gpt-tiny", "llama-tiny"):
            model = os.path.join(source, "models", f"{name}.json")
            train = ["train", model, "--data", data, "--train-iters", str(STEPS)] + SIZES
            for precision, (options, *tolerance) in PRECISIONS.items():
                # FP8 on llama-tiny (CI's time: gpt-tiny's FP8 casts are the same code).
                if precision == "f32" or (not sanitizer and name == "llama-tiny"):
                    compare(s, work, train + options, CP2, f"{name}, CP2, {precision}",
                            tolerance, mpirun, differs=True)
        # (d) with data and tensor parallelism (4 ranks; not in the sanitizer build).
        model = os.path.join(source, "models", "llama-tiny.json")
        train = ["train", model, "--data", data, "--train-iters", "4"] + SIZES
        # (CP2 x DP2 alone is below, with the distributed optimizer.)
        for options in () if sanitizer else (
                CP2 + ["--tensor-model-parallel-size", "2", "--sequence-parallel"],):
            compare(s, work, train, options, "llama-tiny, TP2 x CP2 with SP, f32",
                    PRECISIONS["f32"][1:], four, differs=True)
        gpt = ["train", os.path.join(source, "models", "gpt-tiny.json"), "--data", data,
               "--train-iters", "4"] + SIZES
        if not sanitizer: # the learned position table's rows over cp, then over tp
            compare(s, work, gpt, CP2 + ["--tensor-model-parallel-size", "2",
                                         "--sequence-parallel"],
                    "gpt-tiny, TP2 x CP2 with SP, f32", PRECISIONS["f32"][1:], four,
                    differs=True)
        # Selective recompute makes each ring again in the backward, on both ranks (not in
        # the sanitizer build, whose time goes to the code paths (b) does not reach).
        if not sanitizer:
            compare(s, work, gpt, CP2 + ["--recompute-granularity", "selective"],
                    "gpt-tiny, CP2 with selective recompute, f32", PRECISIONS["f32"][1:],
                    mpirun, differs=True)
        if not sanitizer: # the distributed optimizer over cp+dp, and its checkpoint on one rank
            zero = CP2 + ["--use-distributed-optimizer"]
            compare(s, work, train, zero, "llama-tiny, CP2 x DP2 with the distributed "
                    "optimizer, f32", PRECISIONS["f32"][1:], four, differs=True)
            saved, resumed = os.path.join(work, "zero-save"), os.path.join(work, "zero-resumed")
            options = SIZES + ["--lr-decay-iters", "4", "--data", data]
            first = run(four + ["train", model, "--train-iters", "2", "--save", saved] + zero +
                        options, env)
            second = run([binary, "train", model, "--train-iters", "4", "--load", saved,
                          "--metrics", resumed] + options, single_env)
            whole = os.path.join(work, "zero-whole")
            third = run([binary, "train", model, "--train-iters", "4", "--metrics", whole] +
                        options, single_env)
            if check(first.returncode == second.returncode == third.returncode == 0,
                     "one rank resumes CP2 x DP2's distributed-optimizer checkpoint",
                     first.stderr[-800:] + second.stderr[-800:] + third.stderr[-800:]):
                a, b = losses(whole)[2:], losses(resumed)
                check(len(a) == 2 and close(a, b, PRECISIONS["f32"][1:]), "iterations 3-4 "
                      "within f32's tolerance of the uninterrupted run (each rank's moments "
                      "are the rows its place in cp+dp names)", f"{b} against {a}")
            model = os.path.join(source, "models", "mixtral-tiny.json")
            train = ["train", model, "--data", data, "--train-iters", "4"] + SIZES
            compare(s, work, train, CP2, "mixtral-tiny, CP2, f32", PRECISIONS["f32"][1:],
                    mpirun, differs=True)
        # (e) checkpoints across layouts (not in the sanitizer build: the shards' code paths
        # are distributed.tensor_parallel's there).
        if not sanitizer:
            model = os.path.join(source, "models", "gpt-tiny.json")
            options = SIZES + ["--lr-decay-iters", "4", "--data", data]
            first = ["train", model, "--train-iters", "2"] + options
            rest = ["train", model, "--train-iters", "4"] + options
            paths = {n: os.path.join(work, f"resume-{n}") for n in ("whole", "cp", "one", "a", "b")}
            runs = [run([binary] + rest + ["--metrics", paths["whole"]], single_env),
                    run(mpirun + first + CP2 + ["--save", paths["cp"]], env),
                    run([binary] + first + ["--save", paths["one"]], single_env)]
            if check(all(r.returncode == 0 for r in runs), "the uninterrupted run; CP2 and one "
                     "rank save at iteration 2", "\n".join(r.stderr[-800:] for r in runs)):
                resumed = [run([binary] + rest + ["--load", paths["cp"], "--metrics", paths["a"]],
                               single_env),
                           run(mpirun + rest + CP2 + ["--load", paths["one"], "--metrics",
                                                      paths["b"]], env)]
                whole = losses(paths["whole"])[2:]
                cases = [(resumed[0], paths["a"], "one rank resumes CP2's checkpoint"),
                         (resumed[1], paths["b"], "CP2 resumes one rank's checkpoint")]
                for r, path, what in cases:
                    if check(r.returncode == 0, what, r.stderr[-1500:]):
                        got = losses(path)
                        check(len(whole) == 2 and close(whole, got, PRECISIONS["f32"][1:]),
                              f"{what}: iterations 3-4 within f32's tolerance of the "
                              "uninterrupted run", f"{got} against {whole}")
        # (f) refusals.
        compile_ = [binary, "compile", os.path.join(source, "models", "gpt-tiny.json"), "-o",
                    os.path.join(work, "refused"), "--micro-batch-size", "2", "--world-size",
                    "2"] + CP2
        odd = run(compile_ + ["--seq-length", "34"], single_env)
        check(odd.returncode != 0 and "the sequence of 34 tokens does not split into 2 x "
              "--context-parallel-size = 4 chunks" in odd.stderr,
              "a sequence 2 x CP does not divide is refused, naming the numbers",
              odd.stderr[-800:])
        mixes = os.path.join(work, "mixes.f8ir")
        with open(mixes, "w") as f:
            f.write(MIXES)
        cumsum = run([binary, "compile", mixes, "-o", os.path.join(work, "refused"),
                      "--micro-batch-size", "2", "--world-size", "2", "--seq-length", "32"] + CP2,
                     single_env)
        check(cumsum.returncode != 0 and "--context-parallel-size 2: %mixed (CumSum) is not an "
              "op f8c splits along the sequence" in cumsum.stderr, "a model that mixes tokens "
              "along the sequence by a CumSum is refused under CP, naming the node",
              cumsum.stderr[-800:])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
