#!/usr/bin/env python3
"""Expert parallelism on the CPU with MPI (issue 16), against the single-rank run:

(a) the plan: `f8c dump-ir --after shard` of mixtral-tiny under EP2 x DP2 (4 ranks) keeps 2 of
    the 4 experts of every MoE layer on each rank (the experts' weights and their FP8 copies
    placed shard over ep), sends the dispatched rows to their experts' ranks and back
    (AllToAllDispatch and AllToAllCombine over ep, their gradients the other way), sums the
    experts' gradients over dp alone (the ranks that hold the same experts: Megatron-LM's
    expert data-parallel group) and the others' over ep+dp, reduces the experts' FP8 amaxes
    over dp and the others' over ep+dp, and sums the gradient norm's expert class over ep;
(b) mixtral-tiny (top-2 of 4 experts) on 2 expert-parallel ranks, 10 steps on the same global
    batch, data and seed as one rank: in f32 each step's loss and gradient norm within 1e-5
    (the exchange moves rows' bits unchanged; the gradients are the ranks' sums added by the
    all-reduce); in BF16 with FP8 (delayed and current scaling) within 3e-3 for the loss and
    2e-2 for the gradient norm, the tolerances of the other parallelisms' tests (each BF16
    rounding of a differently ordered sum moves the FP8 casts after it; current scaling takes
    each rank's own amax);
(c) --check-weight-hash-across-dp-replicas-interval 1: at every iteration the ranks hold the
    same bits of all they hold alike: over ep, every parameter, moment, scale and amax history
    but the experts' (each rank's scale_inv of every logical tensor is the same); over dp the
    experts' too;
(d) on 4 ranks, in f32 within (b)'s tolerance: EP2 x DP2 with the distributed optimizer (an
    expert's AdamW state split over the ranks that hold it, the others' over all four; the
    experts' moments placed <shard=ep:0,dp:0>), EP2 x TP2 with sequence parallelism (each
    expert's FFN split over tp too), EP2 x PP2; and EP4 (one expert a rank: each grouped cast
    has one scaling slot, still an expert's) in FP8 delayed within (b)'s tolerance, (c)'s check
    included;
(e) checkpoints: EP2's FP8 (delayed) save resumes on one rank, one rank's under EP2, and EP2 x
    DP2's with the distributed optimizer under EP4 and on one rank, iterations 3-4 within (b)'s
    tolerance of the uninterrupted run; each rank's shard labels its experts' scaling slots by
    the whole model's expert numbers;
(f) what cannot be is refused, naming it: EP not dividing the experts, EP on a model without
    experts, EP not dividing the data-parallel size;
(g) --log-fp8-stats under EP2 logs every rank's experts' scaling slots and the others once, by
    the labels of one rank, iteration 1's weight scales one rank's bit for bit.

Usage: test_expert_parallel.py F8C SOURCE_DIR [--sanitizer-build]
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402
from ranks import (FP8, PRECISIONS, SIZES, SKIP, STEPS, compare, resumes, run,  # noqa: E402
                   setup, tokenize)

EP2 = ["--expert-model-parallel-size", "2"]
EP4 = ["--expert-model-parallel-size", "4"]


def plan(binary, source, env):
    """(a) What the passes split and reduce, as dump-ir prints it."""
    model = os.path.join(source, "models", "mixtral-tiny.json")
    dumped = run([binary, "dump-ir", model, "--after", "shard", "--world-size", "4",
                  "--target", "cpu", "--report", "--dim", "batch=2", "--dim", "seq=64"] + EP2 +
                 FP8, env)
    if not check(dumped.returncode == 0, "dump-ir --after shard under EP2 x DP2",
                 dumped.stderr[-1500:]):
        return
    ir, report = dumped.stdout, dumped.stderr
    check("expert-parallel: 2 MoE layers' experts split over ep = 2 ranks (4 expert weights "
          "placed shard along dim 0)" in report, "the report says what the pass split",
          report[-1500:])
    check("shard: mesh tp=1 cp=1 ep=2 dp=2 pp=1" in report, "the mesh is EP2 x DP2",
          report[-1500:])
    lines = ir.splitlines()
    cache = [l for l in lines
             if l.strip().startswith("cache %layers.0.mlp.experts.fc1.weight.fp8 ")]
    check("param %layers.0.mlp.experts.fc1.weight : f32[2, 512, 128] <shard=ep:0>" in ir and
          len(cache) == 1 and "e4m3[2, 512, 128]" in cache[0] and
          cache[0].endswith("shard=ep:0>"), "each rank holds 2 of the 4 experts' weights, and "
          "their FP8 copies, placed shard over ep",
          "\n".join(l for l in lines if "experts.fc1.weight" in l)[:1500])
    check("%layers.0.mlp.dispatch.rows.received : bf16[512, 128], "
          "%layers.0.mlp.dispatch.rows.local_counts : i64[2], "
          "%layers.0.mlp.dispatch.rows.received_counts : i64[2, 2] = "
          "AllToAllDispatch(%layers.0.mlp.dispatch.rows, %layers.0.mlp.dispatch.counts) "
          '{group="ep", ranks=2}' in ir,
          "the dispatched rows go to their experts' ranks (in a buffer of EP x the rank's "
          "rows), with the rows per local expert",
          "\n".join(l for l in lines if "AllToAll" in l)[:1500])
    backs = [l for l in lines if "= AllToAllCombine(" in l and 'group="ep"' in l]
    check(len(backs) == 4 and sum("phase=bwd" in l for l in backs) == 2,
          "the experts' outputs come back by AllToAllCombine, and the rows' gradients by it in "
          "the backward", "\n".join(backs))
    reduces = [l for l in lines if "= AllReduce(" in l and "phase=opt" in l and
               "main_grad" in l]
    experts = [l for l in reduces if "experts.fc1.weight.main_grad" in l]
    others = [l for l in reduces if "attn.qkv.weight.main_grad" in l]
    zero = run([binary, "dump-ir", model, "--after", "shard", "--world-size", "4", "--target",
                "cpu", "--dim", "batch=2", "--dim", "seq=64", "--use-distributed-optimizer"] +
               EP2, env)
    check(zero.returncode == 0 and "state %layers.0.mlp.experts.fc1.weight.exp_avg : "
          "f32[1, 512, 128] <shard=ep:0,dp:0>" in zero.stdout and
          '%layers.0.mlp.experts.fc1.weight.main_grad.shard : f32[1, 512, 128]' in zero.stdout,
          "with the distributed optimizer an expert's moments are split over ep, then over dp "
          "(the ranks that hold the same experts)", zero.stderr[-800:])
    check(len(experts) == 1 and '{group="dp", op="sum"}' in experts[0] and
          "router" not in experts[0] and len(others) == 1 and
          '{group="ep+dp", op="sum"}' in others[0] and "experts" not in others[0],
          "the experts' gradients are summed over dp alone, the others' over ep+dp",
          "\n".join(reduces)[:2000])
    amaxes = [l for l in lines if "= AllReduce(" in l and 'op="max"' in l]
    check(any("mlp.dispatch.rows.received.amax" in l and '{group="dp", op="max"}' in l
              for l in amaxes) and
          any("attn_norm.amax" in l and '{group="ep+dp", op="max"}' in l for l in amaxes) and
          not any("experts" in l and "ep+dp" in l for l in amaxes),
          "the experts' FP8 amaxes are max-reduced over dp alone, the others' over ep+dp",
          "\n".join(amaxes)[:2000])
    check('= AllReduce(%grad_norm.ep_square) {group="ep", op="sum"}' in ir or
          '{group="ep+dp", op="sum"}' in ir and "grad_norm.ep" in ir,
          "the gradient norm sums the experts' squares over ep")


def fp8_stats(s, work, data, model):
    """(g) --log-fp8-stats under EP2: rank 0 logs every rank's experts' slots with the slots all
    hold alike, each by its label, the labels those of one rank; iteration 1's weight amaxes and
    scales (made from the same initial weights) are one rank's, bit for bit."""
    train = ["train", model, "--data", data, "--train-iters", "2", "--log-fp8-stats", "1"] + \
        SIZES + FP8
    paths = [os.path.join(work, f"stats-{n}.jsonl") for n in ("one", "ep")]
    runs = [run([s.binary] + train + ["--metrics", paths[0]], s.single_env),
            run(s.mpirun + train + EP2 + ["--metrics", paths[1]], s.env)]
    if not check(all(r.returncode == 0 for r in runs), "--log-fp8-stats: one rank and EP2 train",
                 "\n".join(r.stderr[-1000:] for r in runs)):
        return
    logged = []
    for path in paths:
        with open(path) as f:
            records = [json.loads(line) for line in f]
        slots = next((r["fp8_slots"] for r in records if "fp8_slots" in r), {})
        first = next((r["fp8_stats"] for r in records if "fp8_stats" in r), {})
        logged.append((slots, {t: dict(zip(labels, zip(first[t]["amax"], first[t]["scale"])))
                               for t, labels in slots.items() if t in first}))
    (one, one_stats), (ep, ep_stats) = logged
    check(len(one) == 3 and {t: sorted(l) for t, l in one.items()} ==
          {t: sorted(l) for t, l in ep.items()} and
          "w of layers.1.mlp.experts.fc2 [expert 3]" in ep.get("fp8.weights", []),
          "--log-fp8-stats under EP2 logs every expert's slots and the others once, by the "
          "labels of one rank", f"{one}\nagainst\n{ep}")
    check(one_stats.get("fp8.weights") == ep_stats.get("fp8.weights") and one_stats,
          "iteration 1's weight amaxes and scales under EP2 are one rank's, bit for bit",
          f"{one_stats.get('fp8.weights')}\nagainst\n{ep_stats.get('fp8.weights')}")


def main():
    s = setup(sys.argv)
    if not s:
        return SKIP
    binary, source, sanitizer, mpirun = s.binary, s.source, s.sanitizer, s.mpirun
    single_env = s.single_env
    plan(binary, source, single_env)
    model = os.path.join(source, "models", "mixtral-tiny.json")
    with tempfile.TemporaryDirectory() as work:
        data = tokenize(s, work)
        if not data:
            return finish()
        # (b), (c) EP2 against one rank (the sanitizer build: f32).
        train = ["train", model, "--data", data, "--train-iters", str(STEPS)] + SIZES
        for precision, (options, *tolerance) in PRECISIONS.items():
            if precision == "f32" or not sanitizer:
                compare(s, work, train + options, EP2, f"mixtral-tiny, EP2, {precision}",
                        tolerance, mpirun)
        if sanitizer:
            return finish()
        # (d) With the other parallelisms, on 4 ranks (a global batch of 4 micro-batches).
        train = ["train", model, "--data", data, "--train-iters", "4", "--micro-batch-size",
                 "2", "--global-batch-size", "8", "--seq-length", "32", "--log-interval", "1"]
        for options, what in ((EP2 + ["--use-distributed-optimizer"],
                               "EP2 x DP2, distributed optimizer"),
                              (EP2 + ["--tensor-model-parallel-size", "2",
                                      "--sequence-parallel"], "EP2 x TP2, SP"),
                              (EP2 + ["--pipeline-model-parallel-size", "2"], "EP2 x PP2")):
            compare(s, work, train, options, f"mixtral-tiny, {what}, f32",
                    PRECISIONS["f32"][1:], s.four)
        # One expert a rank: each grouped cast has one slot, still an expert's.
        options, *tolerance = PRECISIONS["delayed"]
        compare(s, work, train + options, EP4, "mixtral-tiny, EP4, delayed", tolerance, s.four)
        # (e) Checkpoints across layouts, in FP8 (delayed scaling).
        train = ["train", model, "--data", data] + SIZES + FP8
        one = [s.binary]
        saved = resumes(s, work, train, (mpirun, EP2), [(one, [], "one rank")],
                        "mixtral-tiny EP2 FP8", PRECISIONS["delayed"][1:])
        wide = ["train", model, "--data", data, "--micro-batch-size", "2",
                "--global-batch-size", "8", "--seq-length", "32", "--log-interval", "1"] + FP8
        resumes(s, work, wide, (s.four, EP2 + ["--use-distributed-optimizer"]),
                [(s.four, EP4, "EP4"), (one, [], "one rank")],
                "mixtral-tiny EP2 x DP2 FP8, distributed optimizer", PRECISIONS["delayed"][1:])
        resumes(s, work, train, (one, []), [(mpirun, EP2, "EP2")], "mixtral-tiny one rank FP8",
                PRECISIONS["delayed"][1:])
        if saved:
            from safetensors import safe_open
            experts = []
            for r in (0, 1):
                path = os.path.join(saved, "iter_0000002",
                                    f"optimizer-{r:05d}-of-00002.safetensors")
                with safe_open(path, framework="numpy") as f:
                    labels = (f.metadata() or {}).get("slots.fp8.weights", "").split("\n")
                experts.append(sorted(l for l in labels if "layers.0.mlp.experts.fc1" in l))
            check(experts == [[f"w of layers.0.mlp.experts.fc1 [expert {e}]" for e in pair]
                              for pair in ((0, 1), (2, 3))],
                  "each rank's shard labels its experts' scaling slots by the whole model's "
                  "expert numbers", str(experts))
        fp8_stats(s, work, data, model)
        # (f) refusals.
        compile_ = [binary, "compile", model, "-o", os.path.join(work, "refused"),
                    "--micro-batch-size", "2", "--seq-length", "32"]
        odd = run(compile_ + ["--world-size", "3", "--expert-model-parallel-size", "3"],
                  single_env)
        check(odd.returncode != 0 and "--expert-model-parallel-size 3 does not divide the 4 "
              "experts" in odd.stderr, "EP not dividing the experts is refused, naming the "
              "numbers", odd.stderr[-800:])
        dense = run([binary, "compile", os.path.join(source, "models", "gpt-tiny.json"), "-o",
                     os.path.join(work, "refused"), "--micro-batch-size", "2", "--seq-length",
                     "32", "--world-size", "2"] + EP2, single_env)
        check(dense.returncode != 0 and "--expert-model-parallel-size 2: the model has no "
              "experts" in dense.stderr, "EP on a model without experts is refused",
              dense.stderr[-800:])
        data_parallel = run(compile_ + ["--world-size", "2", "--tensor-model-parallel-size",
                                        "2"] + EP2, single_env)
        check(data_parallel.returncode != 0 and "--expert-model-parallel-size 2 does not "
              "divide the data-parallel size 1" in data_parallel.stderr,
              "EP not dividing the data-parallel size is refused, naming the numbers",
              data_parallel.stderr[-800:])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
