#!/usr/bin/env python3
"""Pipeline parallelism on the CPU with MPI (issue 16), against the single-rank run:

(a) the plans: `f8c dump-ir --after training` of llama-tiny under PP2 gives stage 0 layers 0-1
    and the embedding, ending in a Send over pp of the residual stream, whose gradient it
    receives back in the backward; stage 1 receives it, runs layers 2-3, the head and the loss,
    and sends the received activation's gradient back; each stage holds only its parameters;
(b) llama-tiny and gpt-tiny (its embedding table tied to the head: both the first and the
    last stage hold it, and its gradient is summed between them, Megatron-LM's embedding
    group), 2 ranks under mpirun, 10 steps on the same global batch, data and seed as one rank:
    in f32 each step's loss and gradient norm within 1e-5 (the same sums but for the gradient
    norm, whose stages' squares are added over pp, and the tied table's gradient, whose
    lookup and head terms are added in another order: measured 3e-6 and 4e-6); in BF16 with FP8
    (delayed and current scaling: each stage has its own scaling tables; llama-tiny) within
    3e-3 and 2e-2, as the other parallelisms' tests; the evaluation loss too; and llama-tiny
    in FP8 with delayed scaling and full recompute, the losses of 4 steps one rank's to the
    bit (each recomputed cast reads its micro-batch's forward scales);
(c) 4 ranks, in f32 within (b)'s tolerance, the replicas of each stage agreeing over tp, cp and
    dp at every iteration: gpt-tiny in PP4 (a layer a stage; the tied table on stages 0 and 3
    only) and TP2 x PP2 with sequence parallelism; llama-tiny in PP2 x DP2 with the
    distributed optimizer and CP2 x PP2;
(d) `f8c audit` under PP audits every stage's program in turn: its GEMMs, its collectives (the
    Send and Recv over pp with their bytes) and, with --memory, its memory, stage s's with the
    activations of PP - s micro-batches in flight (1F1B);
(e) checkpoints: each stage writes its shards, and a save under one layout resumes under
    another. llama-tiny in FP8 with delayed scaling, whose PP2 run is one rank's to the bit:
    PP2's save at iteration 2 resumed on one rank, and one rank's resumed under PP2, give
    iterations 3-4 of the uninterrupted run bit for bit, so every scaling slot got its own
    scale and history although each stage numbers its slots from 0 (the shards' labels of
    the slots, together, are the one-rank save's). gpt-tiny (tied embeddings) in f32: TP2 x
    PP2's save resumed on one rank and under DP2 with the distributed optimizer, within f32's
    tolerance. A shard holding a tensor that no stage has is refused, naming it;
(f) --log-fp8-stats under PP: rank 0 logs every stage's scaling slots, gathered over pp, by
    label; llama-tiny's amaxes and scales are one rank's to the bit;
(g) the interleaved schedule (--num-layers-per-virtual-pipeline-stage 1: PP2 with 2 model
    chunks a stage, stage 0 layers 0 and 2, stage 1 layers 1 and 3): each stage's program
    sends and receives each chunk's activation and gradient with a tag of its own, and the
    report says which layers each chunk runs; 10 steps of 4 micro-batches (warm-up, steady
    state and cool-down) against one rank on the same global batch: gpt-tiny in f32 within
    (b)'s tolerance (the same sums: measured to the printed digits), llama-tiny in FP8 without
    clipping (the gradient norm's stage sums are added in another order), current scaling
    within 1e-5 (one rank's), delayed within 3e-3 of the loss and 8e-2 of the gradient norm: a
    stage's table takes a micro-batch's amaxes after its last chunk's forward, so its first
    chunk's casts of the micro-batches in flight use scales one update older than one rank's; a step whose micro-batches are not a multiple
    of the stages is refused, as Megatron-LM refuses it, and so is recomputing delayed casts
    (one copy of the forward's scales a chunk is not built).

The stages run Megatron-LM's 1F1B schedule (runtime/pipeline_schedule.h), or in (g) its
interleaved one: in (b), with two
micro-batches a step, stage 0 runs both forwards before the first backward, each micro-batch in
an executor context (a slab) of its own, which its --verbose memory line shows; the order
itself is runtime.executor's test. Its numerics are those of running each micro-batch's
forward and backward in turn, which the comparisons hold.

Usage: test_pipeline_parallel.py F8C SOURCE_DIR [--sanitizer-build]
"""
import json
import os
import shutil
import sys
import tempfile

import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402
from ranks import (FP8, PRECISIONS, SIZES, SKIP, STEPS, compare, resumes, run,  # noqa: E402
                   setup, tokenize)

PP2 = ["--pipeline-model-parallel-size", "2"]
VIRTUAL = PP2 + ["--num-layers-per-virtual-pipeline-stage", "1"]


def plan(binary, source, env):
    """(a) Each stage's program, as dump-ir prints it."""
    model = os.path.join(source, "models", "llama-tiny.json")
    stages = []
    for stage in (0, 1):
        dumped = run([binary, "dump-ir", model, "--after", "training", "--world-size", "2",
                      "--pipeline-stage", str(stage), "--report", "--dim", "batch=2", "--dim",
                      "seq=32"] + PP2, env)
        if not check(dumped.returncode == 0, f"dump-ir of stage {stage} under PP2",
                     dumped.stderr[-1500:]):
            return
        stages.append((dumped.stdout, dumped.stderr))
    (first, first_report), (last, last_report) = stages
    gpt = os.path.join(source, "models", "gpt-tiny.json")
    tied = [run([binary, "dump-ir", gpt, "--after", "shard", "--world-size", "2",
                 "--pipeline-stage", str(stage), "--dim", "batch=2", "--dim", "seq=32"] + PP2,
                env) for stage in (0, 1)]
    if check(all(t.returncode == 0 for t in tied), "dump-ir --after shard of gpt-tiny's stages",
             "".join(t.stderr[-800:] for t in tied)):
        check(all("param %embed.weight : f32[256, 128] <tied=pp>" in t.stdout for t in tied),
              "the tied embedding table is held by both stages, placed tied=pp")
        check('  Send(%embed.weight.main_grad) {group="pp", peer=1} scope="optimizer" '
              "phase=opt" in tied[0].stdout and "= Add(%embed.weight.main_grad, "
              "%embed.weight.main_grad.tied_other)" in tied[0].stdout and
              "= Add(%embed.weight.main_grad.tied_other, %embed.weight.main_grad)"
              in tied[1].stdout, "its gradient is sent and received between the first and the "
              "last stage, each adding the first stage's term first")
    check("pipeline-parallel: stage 0 of 2: layers 0 to 1; sends %layers.1.mlp_residual"
          in first_report and "pipeline-parallel: stage 1 of 2: layers 2 to 3; receives "
          "%layers.1.mlp_residual; the head and the loss" in last_report,
          "the report says which layers each stage runs and what it sends and receives",
          first_report[-800:] + last_report[-800:])
    check('  Send(%layers.1.mlp_residual) {group="pp", peer=1}' in first and
          '= Recv() {group="pp", peer=1, dtype=f32, shape=[2, 32, 128]} scope="pipeline" '
          "phase=bwd" in first, "stage 0 sends the residual stream after layer 1 and receives "
          "its gradient back in the backward")
    check('%layers.1.mlp_residual.recv : f32[2, 32, 128] = Recv() {group="pp", peer=0' in last
          and 'Send(%layers.1.mlp_residual.recv.grad) {group="pp", peer=0}' in last,
          "stage 1 receives the residual stream and sends its gradient back")
    check("param %layers.0.attn.qkv.weight" in first and "param %layers.0." not in last and
          "param %layers.2.attn.qkv.weight" in last and "param %layers.2." not in first and
          "param %head.weight" in last and "param %head.weight" not in first and
          "%loss" in last and "%loss " not in first,
          "each stage holds its layers' parameters; the head and the loss are the last "
          "stage's")



def interleaved(s, work, data, models):
    """(g) PP2 with 2 model chunks a stage against one rank."""
    dumped = [run([s.binary, "dump-ir", models["gpt-tiny"], "--after", "training",
                   "--world-size", "2", "--pipeline-stage", str(stage), "--report", "--dim",
                   "batch=2", "--dim", "seq=32"] + VIRTUAL, s.single_env) for stage in (0, 1)]
    if check(all(d.returncode == 0 for d in dumped), "dump-ir of the interleaved stages",
             "".join(d.stderr[-800:] for d in dumped)):
        first, last = dumped[0].stdout, dumped[1].stdout
        check("pipeline-parallel: stage 0 of 2: layers 0 to 0 (model chunk 0 of 4); sends "
              "%layers.0.mlp_residual; layers 2 to 2 (model chunk 2 of 4); receives "
              "%layers.1.mlp_residual; sends %layers.2.mlp_residual" in dumped[0].stderr and
              "pipeline-parallel: stage 1 of 2: layers 1 to 1 (model chunk 1 of 4); receives "
              "%layers.0.mlp_residual; sends %layers.1.mlp_residual; layers 3 to 3 (model chunk "
              "3 of 4); receives %layers.2.mlp_residual; the head and the loss"
              in dumped[1].stderr, "the report says which layers each model chunk runs",
              dumped[0].stderr[-800:] + dumped[1].stderr[-800:])
        # Chunk boundary g's activation has tag 2 g, its gradient 2 g + 1.
        check('Send(%layers.0.mlp_residual) {group="pp", peer=1, tag=0}' in first and
              'Send(%layers.2.mlp_residual) {group="pp", peer=1, tag=4}' in first and
              'Send(%layers.1.mlp_residual.recv.grad) {group="pp", peer=1, tag=3}' in first and
              'Send(%layers.1.mlp_residual) {group="pp", peer=0, tag=2}' in last and
              'Send(%layers.0.mlp_residual.recv.grad) {group="pp", peer=0, tag=1}' in last and
              'Send(%layers.2.mlp_residual.recv.grad) {group="pp", peer=0, tag=5}' in last and
              "shape=[2, 32, 128], tag=5} scope=\"pipeline\" phase=bwd" in first,
              "each chunk boundary's activation and gradient go with a tag of their own")
    sizes = [("8" if option == "4" and SIZES[i - 1] == "--global-batch-size" else option)
             for i, option in enumerate(SIZES)]
    # f32 on gpt-tiny (its tied embedding on the first and the last stage); llama-tiny below.
    train = ["train", models["gpt-tiny"], "--data", data, "--train-iters", str(STEPS)] + sizes
    compare(s, work, train, VIRTUAL, "gpt-tiny, PP2 interleaved (2 model chunks a stage), f32",
            PRECISIONS["f32"][1:], s.mpirun)
    # FP8 without clipping: the gradient norm's stage sums are added in another order than one
    # rank's, which under clipping moves the f32 master weights in their last bits and the BF16
    # copies by an ulp here and there; without it current scaling is one rank's (the losses to
    # the bit, the norm as printed within 1e-5), and delayed scaling within the lag of its
    # first chunk's scales (measured: losses 3e-4, gradient norms 4e-2 at step 8's spike).
    train = ["train", models["llama-tiny"], "--data", data, "--train-iters", str(STEPS),
             "--clip-grad", "0"] + sizes
    for precision, tolerance in (("current", (1e-5, 1e-5)), ("delayed", (3e-3, 8e-2))):
        compare(s, work, train + PRECISIONS[precision][0], VIRTUAL, "llama-tiny, PP2 "
                f"interleaved (2 model chunks a stage), {precision}, no clipping", tolerance,
                s.mpirun)
    refused = run([s.binary, "compile", models["llama-tiny"], "-o", os.path.join(work, "odd"),
                   "--world-size", "2", "--seq-length", "32", "--micro-batch-size", "2",
                   "--global-batch-size", "6"] + VIRTUAL, s.single_env)
    check(refused.returncode != 0 and "the interleaved schedule runs the micro-batches in groups "
          "of --pipeline-model-parallel-size 2, and a step has 3" in refused.stderr,
          "a step of 3 micro-batches over 2 stages is refused", refused.stderr[-800:])
    # A recomputed delayed cast would need its chunk's copy of the forward's scales.
    refused = run([s.binary, "compile", models["llama-tiny"], "-o", os.path.join(work, "re"),
                   "--world-size", "2", "--seq-length", "32", "--micro-batch-size", "2",
                   "--global-batch-size", "4", "--recompute-granularity", "full", "--recompute-method", "uniform",
                   "--recompute-num-layers", "1"] + FP8 + VIRTUAL, s.single_env)
    check(refused.returncode != 0 and "recompute: a delayed-scaling cast recomputed under the "
          "interleaved pipeline schedule" in refused.stderr, "recompute of delayed casts under "
          "the interleaved schedule is refused as not built", refused.stderr[-800:])


def slot_labels(folder, names):
    """Each scaling table's slot labels in the optimizer files `names` of `folder`, in order."""
    from safetensors import safe_open
    tables = {}
    for name in names:
        with safe_open(os.path.join(folder, name), framework="numpy") as f:
            for key, value in (f.metadata() or {}).items():
                if key.startswith("slots."):
                    tables.setdefault(key[len("slots."):], []).extend(value.split("\n"))
    return tables


def fp8_stats(s, work, data, models):
    """--log-fp8-stats under PP: rank 0 writes every stage's slots, each by its label, with the
    one-rank run's amaxes and scales to the bit (llama-tiny PP2 is one rank's to the bit)."""
    train = ["train", models["llama-tiny"], "--data", data, "--train-iters", "2",
             "--log-fp8-stats", "1"] + SIZES + FP8
    paths = [os.path.join(work, f"stats-{n}.jsonl") for n in ("one", "pp")]
    runs = [run([s.binary] + train + ["--metrics", paths[0]], s.single_env),
            run(s.mpirun + train + PP2 + ["--metrics", paths[1]], s.env)]
    if not check(all(r.returncode == 0 for r in runs), "--log-fp8-stats: one rank and PP2 train",
                 "\n".join(r.stderr[-1000:] for r in runs)):
        return
    tables = []
    for path in paths:
        with open(path) as f:
            records = [json.loads(line) for line in f]
        slots = next((r["fp8_slots"] for r in records if "fp8_slots" in r), {})
        steps = [r["fp8_stats"] for r in records if "fp8_stats" in r]
        tables.append({t: [dict(zip(labels, zip(step[t]["amax"], step[t]["scale"])))
                           for step in steps] for t, labels in slots.items()})
    one, pp = tables
    check(len(one) == 3 and one == pp and all(len(steps) == 2 for steps in one.values()),
          "--log-fp8-stats under PP2 logs both stages' slots, each table's amaxes and scales "
          "by label those of one rank, bit for bit", f"{one}\nagainst\n{pp}")


def checkpoints(s, work, data, models):
    """(e) Checkpoints under PP, resumed under other layouts."""
    one, two = [s.binary], s.mpirun
    train = ["train", models["llama-tiny"], "--data", data] + SIZES + FP8
    pp = resumes(s, work, train, (two, PP2), [(one, [], "one rank")], "llama-tiny PP2 FP8",
                 None)
    single = resumes(s, work, train, (one, []), [(two, PP2, "PP2")], "llama-tiny one rank FP8",
                     None)
    if pp and single:
        stages = slot_labels(os.path.join(pp, "iter_0000002"),
                             [f"optimizer-{r:05d}-of-00002.safetensors" for r in (0, 1)])
        whole = slot_labels(os.path.join(single, "iter_0000002"), ["optimizer.safetensors"])
        check(set(whole) == {"fp8.weights", "fp8.activations", "fp8.gradients"} and
              all(sorted(stages.get(t, [])) == sorted(labels) for t, labels in whole.items()) and
              "w of layers.3.mlp.fc2" in whole["fp8.weights"],
              "the stages' shards label their scaling slots by what they scale, and together "
              "hold the one-rank save's slots", f"{stages}\nagainst\n{whole}")
        # A tensor no stage has: the stages find it together.
        from safetensors.numpy import load_file, save_file
        from safetensors import safe_open
        stray = os.path.join(work, "stray")
        shutil.copytree(os.path.join(single, "iter_0000002"), stray)
        path = os.path.join(stray, "weights.safetensors")
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata()
        tensors = load_file(path)
        tensors["stray.weight"] = numpy.ones((2, 2), numpy.float32)
        save_file(tensors, path, metadata)
        refused = run(two + train + PP2 + ["--train-iters", "4", "--lr-decay-iters", "4",
                                           "--load", stray], s.env)
        check(refused.returncode != 0 and "'stray.weight', which no pipeline stage of the "
              "model has a leaf for" in refused.stderr,
              "a stored tensor that no stage has is refused, naming it", refused.stderr[-800:])
    if s.sanitizer:
        return
    train = ["train", models["gpt-tiny"], "--data", data] + SIZES
    resumes(s, work, train, (s.four, PP2 + ["--tensor-model-parallel-size", "2"]),
            [(one, [], "one rank"), (two, ["--use-distributed-optimizer"],
                                     "DP2 with the distributed optimizer")],
            "gpt-tiny TP2 x PP2 f32", PRECISIONS["f32"][1:])


def main():
    s = setup(sys.argv)
    if not s:
        return SKIP
    binary, source, sanitizer, mpirun = s.binary, s.source, s.sanitizer, s.mpirun
    env, single_env = s.env, s.single_env
    four = s.four
    plan(binary, source, single_env)
    with tempfile.TemporaryDirectory() as work:
        data = tokenize(s, work)
        if not data:
            return finish()
        evaluate = ["--eval-interval", "5", "--eval-iters", "2"]
        # (b) PP2 against one rank (the sanitizer build: llama-tiny in f32).
        models = {name: os.path.join(source, "models", f"{name}.json")
                  for name in ("llama-tiny", "gpt-tiny")}
        for name, model in models.items():
            if sanitizer and name != "llama-tiny":
                continue
            train = ["train", model, "--data", data, "--train-iters", str(STEPS)] + SIZES + \
                evaluate
            for precision, (options, *tolerance) in PRECISIONS.items():
                # FP8 on llama-tiny (CI's time: each stage's tables are the same code).
                if precision == "f32" or (not sanitizer and name == "llama-tiny"):
                    ran = compare(s, work, train + options, PP2 + ["--verbose"],
                                  f"{name}, PP2, {precision}", tolerance, mpirun,
                                  evaluated=True)
                    check(not ran or "memory: the plan's 2 slabs (micro-batches in flight)" in
                          ran.stderr, f"{name}, PP2, {precision}: under 1F1B stage 0 has two "
                          "micro-batches in flight, each in a slab of its own",
                          ran.stderr[-800:] if ran else "")
        # (b) With full recompute under delayed scaling, each recomputed cast reads its own
        # micro-batch's forward scales although 1F1B runs other forwards (which update the
        # table) before its backward: the losses are one rank's to the bit.
        if not sanitizer:
            recompute = ["--recompute-granularity", "full", "--recompute-method", "uniform",
                         "--recompute-num-layers", "1"]
            train = ["train", models["llama-tiny"], "--data", data, "--train-iters", "4"] + \
                SIZES + FP8 + recompute
            compare(s, work, train, PP2, "llama-tiny, PP2, delayed, full recompute",
                    (0.0, 1e-5), mpirun)
        # (c) 4 ranks (not in the sanitizer build).
        layouts = {"PP4": ["--pipeline-model-parallel-size", "4"],
                   "TP2 x PP2 with SP": PP2 + ["--tensor-model-parallel-size", "2",
                                               "--sequence-parallel"],
                   "PP2 x DP2 with the distributed optimizer": PP2 + [
                       "--use-distributed-optimizer"],
                   "CP2 x PP2": PP2 + ["--context-parallel-size", "2"]}
        runs = [("gpt-tiny", "PP4"), ("gpt-tiny", "TP2 x PP2 with SP"),
                ("llama-tiny", "PP2 x DP2 with the distributed optimizer"),
                ("llama-tiny", "CP2 x PP2")]
        for name, what in () if sanitizer else runs:
            train = ["train", models[name], "--data", data, "--train-iters", "4"] + SIZES + \
                ["--eval-interval", "2", "--eval-iters", "1"]
            compare(s, work, train, layouts[what], f"{name}, {what}, f32",
                    PRECISIONS["f32"][1:], four, evaluated=True)
        # (d) the audit, stage by stage.
        audit = run([binary, "audit", models["gpt-tiny"], "--world-size", "2", "--seq-length",
                     "32", "--memory"] + PP2, single_env)
        out = audit.stdout
        check(audit.returncode == 0 and "pipeline stage 0 of 2:" in out and
              "pipeline stage 1 of 2:" in out and out.count("Send over pp in fwd") == 1 and
              out.count("Recv over pp in fwd") == 1 and out.count("memory on each rank") == 2,
              "the audit prints each stage's GEMMs, collectives and memory",
              out[-2000:] + audit.stderr[-800:])
        first, _, last = out.partition("pipeline stage 1 of 2:")
        check("the activations of 2 micro-batches in flight under 1F1B" in first and
              "micro-batches in flight" not in last, "stage 0's memory holds the activations of "
              "two micro-batches (1F1B), the last stage's one", out[-2000:])
        checkpoints(s, work, data, models)
        if not sanitizer:
            fp8_stats(s, work, data, models)
        if not sanitizer:
            interleaved(s, work, data, models)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
