#!/usr/bin/env python3
"""Data parallelism on the CPU with MPI (issue 16), against the single-rank run:

(a) gpt-tiny, 2 ranks under mpirun (each runs half of every global batch of 4 micro-batches),
    against one rank on the same global batch, data and seed: in f32 every step's loss and
    gradient norm within 1e-6 (only the order of the gradient sums differs: the ranks'
    accumulators are added by MPI's all-reduce, not micro-batch by micro-batch); under FP8
    delayed and current scaling within 1e-3 (the scaling tables take each micro-batch's
    amaxes in another grouping: a max over the ranks' micro-batches at once); the sanitizer
    build runs f32 alone (FP8's collectives are the same; its other tests run FP8);
(b) the replicas hold the same bits (parameters, moments, FP8 scales and amax histories) at
    every iteration: --check-weight-hash-across-dp-replicas-interval 1, as Megatron-LM checks;
(c) rank 0 alone writes the metrics; the two ranks' checkpoint (a shard each) resumes on one
    rank: the losses after it within the tolerance of (a) (not in the sanitizer build: (f)
    saves and resumes across layouts there too);
(d) layouts the model or the world cannot take are refused on every rank, naming the numbers;
(e) faults: a rank that hangs (SIGSTOP) makes the other stop after --distributed-timeout-minutes,
    naming the call and group it waited in; a rank killed (SIGKILL) stops the run at once
    (mpirun names it); either way the last complete checkpoint loads and trains; a save that
    fails on one rank alone fails on both, and the checkpoint before it stays the latest;
(f) the distributed optimizer (--use-distributed-optimizer, ZeRO-1): the audit shows the
    gradients reduce-scattered and the updates all-gathered over dp, and each rank's optimizer
    state half of the replicated run's; 2 ranks train within (a)'s tolerances of one rank, in
    f32 and FP8 delayed (f32 alone in the sanitizer build), the replicas' replicated state
    agreeing at every iteration; its
    checkpoint is a shard per rank, each with its rows of the moments and their layout (one
    process rebuilds the wholes at load): resumed by the same layout it continues the
    uninterrupted run bit for bit, by one rank within (a)'s tolerance, and one rank's
    checkpoint resumes under it.

Usage: test_data_parallel.py F8C SOURCE_DIR [--sanitizer-build]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402
from ranks import SKIP, close, losses, run, setup, tokenize  # noqa: E402

SIZES = ["--micro-batch-size", "2", "--global-batch-size", "8", "--seq-length", "64",
         "--log-interval", "1"]
# name: (options, loss tolerance, gradient norm tolerance)
PRECISIONS = {"f32": ([], 1e-6, 1e-6),
              "delayed": (["--bf16", "--fp8-format", "hybrid"], 1e-3, 1e-2),
              "current": (["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "current"], 1e-6,
                          1e-6)}










def rank_pid(rank, parent):
    """The pid of the f8c process mpirun started as `rank` (its OMPI_COMM_WORLD_RANK)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                variables = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in variables and ppid == parent:
            return int(pid)
    return None


def fault(mpirun, train, save, sig, env):
    """Starts a long run saving every iteration, sends rank 1 `sig` once a checkpoint exists;
    mpirun's result and the seconds from the signal to its end."""
    run = subprocess.Popen(mpirun + train + ["--save", save, "--save-interval", "1",
                                             "--distributed-timeout-minutes", "0.05"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None and \
            not os.path.exists(os.path.join(save, "latest_checkpointed_iteration.txt")):
        time.sleep(0.2)
    pid = rank_pid(1, run.pid) if run.poll() is None else None
    if pid is None:
        run.kill()
        return run.communicate()[1], None, None
    os.kill(pid, sig)
    start = time.monotonic()
    try:
        _, err = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        _, err = run.communicate()
        return err, None, None
    return err, run.returncode, time.monotonic() - start


def shard_fails(mpirun, model, data, work, env):
    """A save that fails on rank 1 alone (its shard's path taken by a folder) fails on both
    ranks, and the checkpoint before it stays the latest."""
    save = os.path.join(work, "one-fails")
    blocked = os.path.join(save, "iter_0000002.saving", "weights-00001-of-00002.safetensors")
    os.makedirs(os.path.join(blocked, "in-the-way"))
    failed = run(mpirun + ["train", model, "--data", data, "--train-iters", "2", "--save", save,
                           "--save-interval", "1"] + SIZES, env)
    with open(os.path.join(save, "latest_checkpointed_iteration.txt")) as f:
        latest = f.read().split()
    check(failed.returncode != 0 and "another rank could not" in failed.stderr and
          latest == ["1"] and not os.path.exists(os.path.join(save, "iter_0000002")),
          "a save whose shard fails on rank 1 alone fails on both ranks; iteration 1's stays the "
          "latest checkpoint", f"exit {failed.returncode}, latest {latest}\n"
          f"{failed.stderr[-1500:]}")


def distributed_optimizer(binary, model, data, work, mpirun, env, single_env, sanitizer):
    """(f): ZeRO-1 against one rank, and its checkpoints across layouts."""
    zero = ["--use-distributed-optimizer"]
    audits = {}
    for name, options in (("replicated", []), ("distributed", zero)):
        audit = run([binary, "audit", model, "--json", "--memory", "--world-size", "2",
                     "--micro-batch-size", "2", "--seq-length", "64"] + options, single_env)
        if not check(audit.returncode == 0, f"audit --world-size 2 {' '.join(options)}",
                     audit.stderr[-800:]):
            return
        audits[name] = json.loads(audit.stdout)
    collectives = {(c["op"], c["group"], c["phase"])
                   for c in audits["distributed"]["distributed"]["collectives"]}
    check({("ReduceScatter", "dp", "opt"), ("AllGather", "dp", "opt")} <= collectives and
          ("AllReduce", "dp", "opt") in collectives,
          "distributed optimizer: gradients reduce-scattered, updates all-gathered over dp (and "
          "the norm's square all-reduced)", str(sorted(collectives)))
    state = [a["memory"]["bytes"]["optimizer states"] for a in (audits["replicated"],
                                                                 audits["distributed"])]
    check(abs(state[1] - state[0] / 2) <= 256, "distributed optimizer: each rank's AdamW "
          f"state is half the replicated run's ({state[1]} against {state[0]} bytes)")
    train = ["train", model, "--data", data, "--train-iters", "4"] + SIZES
    # Under the sanitizers, f32 alone: FP8 adds no code path of the distributed optimizer's.
    for name in ("f32",) if sanitizer else ("f32", "delayed"):
        options, *tolerance = PRECISIONS[name]
        one, two = (os.path.join(work, f"zero-{name}-{n}.jsonl") for n in (1, 2))
        single = run([binary] + train + options + ["--metrics", one], single_env)
        parallel = run(mpirun + train + options + zero + [
            "--metrics", two, "--check-weight-hash-across-dp-replicas-interval", "1"], env)
        if check(single.returncode == 0 and parallel.returncode == 0,
                 f"distributed optimizer, {name}: one rank and two train",
                 single.stderr[-1500:] + parallel.stderr[-3000:]):
            a, b = losses(one), losses(two)
            check(len(a) == 4 and close(a, b, tolerance), f"distributed optimizer, {name}: "
                  f"losses and gradient norms within {tolerance} of one rank's",
                  f"{a}\nagainst\n{b}")
    # Checkpoints across layouts.
    options = PRECISIONS["delayed"][0] + ["--lr-decay-iters", "4"]
    tolerance = PRECISIONS["delayed"][1:]
    first = ["train", model, "--data", data, "--train-iters", "2"] + SIZES + options
    rest = ["train", model, "--data", data, "--train-iters", "4"] + SIZES + options
    saved = {"zero": os.path.join(work, "zero-save"), "one": os.path.join(work, "one-save")}
    runs = [run(mpirun + first + zero + ["--save", saved["zero"]], env),
            run([binary] + first + ["--save", saved["one"]], single_env)]
    if not check(all(r.returncode == 0 for r in runs), "distributed optimizer: two ranks and "
                 "one save at iteration 2", "".join(r.stderr[-1500:] for r in runs)):
        return
    headers = []
    for rank in range(2):
        name = f"optimizer-{rank:05d}-of-00002.safetensors"
        with open(os.path.join(saved["zero"], "iter_0000002", name), "rb") as f:
            headers.append(json.loads(f.read(int.from_bytes(f.read(8), "little"))))
    moment = [h.get("embed.weight.exp_avg", {}).get("shape") for h in headers]
    layouts = [h.get("__metadata__", {}).get("layout.embed.weight.exp_avg") for h in headers]
    check(moment == [[128, 128], [128, 128]] and layouts == ["dp:0:2:0", "dp:0:2:1"],
          "distributed optimizer: each rank saves its half of a moment's rows, with its layout",
          f"{moment} {layouts}")
    paths = {n: os.path.join(work, f"zero-{n}.jsonl") for n in ("whole", "same", "one", "into")}
    resumed = [run(mpirun + rest + zero + ["--metrics", paths["whole"]], env),
               run(mpirun + rest + zero + ["--load", saved["zero"], "--metrics", paths["same"]],
                   env),
               run([binary] + rest + ["--load", saved["zero"], "--metrics", paths["one"]],
                   single_env),
               run(mpirun + rest + zero + ["--load", saved["one"], "--metrics", paths["into"]],
                   env)]
    if not check(all(r.returncode == 0 for r in resumed), "distributed optimizer: the "
                 "checkpoints resume", "".join(r.stderr[-1500:] for r in resumed)):
        return
    whole = losses(paths["whole"])[2:]
    check(losses(paths["same"]) == whole, "distributed optimizer: resumed by the same layout, "
          "iterations 3-4 are the uninterrupted run's, bit for bit",
          f"{losses(paths['same'])} against {whole}")
    check(close(losses(paths["one"]), whole, tolerance), "distributed optimizer: one rank "
          "resumes the two ranks' checkpoint within the tolerance of (a)",
          f"{losses(paths['one'])} against {whole}")
    check(close(losses(paths["into"]), whole, tolerance), "distributed optimizer: two ranks "
          "resume one rank's checkpoint within the tolerance of (a)",
          f"{losses(paths['into'])} against {whole}")


def resume_on_one(binary, model, data, work, mpirun, env, single_env):
    """(c) The two ranks' checkpoint (FP8 delayed) resumes on one rank."""
    options, *tolerance = PRECISIONS["delayed"]
    options = options + ["--lr-decay-iters", "4"] # one schedule for the three runs
    save = os.path.join(work, "save")
    whole = os.path.join(work, "whole.jsonl")
    first = run(mpirun + ["train", model, "--data", data, "--train-iters", "2", "--save",
                          save] + SIZES + options, env)
    check(first.returncode == 0 and os.path.exists(os.path.join(save, "iter_0000002")),
          "two ranks save at iteration 2", first.stderr[-1500:])
    resumed = os.path.join(work, "resumed.jsonl")
    second = run([binary, "train", model, "--data", data, "--train-iters", "4", "--load",
                  save, "--metrics", resumed] + SIZES + options, single_env)
    uninterrupted = run(mpirun + ["train", model, "--data", data, "--train-iters", "4",
                                  "--metrics", whole] + SIZES + options, env)
    if check(second.returncode == 0 and uninterrupted.returncode == 0,
             "one rank resumes the two ranks' checkpoint",
             second.stderr[-1500:] + uninterrupted.stderr[-1500:]):
        check(close(losses(resumed), losses(whole)[2:], tolerance),
              "the resumed iterations 3-4 within the tolerance of the uninterrupted run",
              f"{losses(resumed)} against {losses(whole)[2:]}")


def main():
    s = setup(sys.argv)
    if not s:
        return SKIP
    binary, source, sanitizer, mpirun = s.binary, s.source, s.sanitizer, s.mpirun
    env, single_env = s.env, s.single_env
    model = os.path.join(source, "models", "gpt-tiny.json")
    with tempfile.TemporaryDirectory() as work:
        data = tokenize(s, work)
        if not data:
            return finish()
        train = ["train", model, "--data", data, "--train-iters", "4"] + SIZES
        for name, (options, *tolerance) in PRECISIONS.items():
            if sanitizer and name != "f32":
                continue  # the collectives of f32's run; the sanitizer build's CI time
            one, two = (os.path.join(work, f"{name}-{n}.jsonl") for n in (1, 2))
            single = run([binary] + train + options + ["--metrics", one], single_env)
            parallel = run(mpirun + train + options + [
                "--metrics", two, "--check-weight-hash-across-dp-replicas-interval", "1"], env)
            if not (check(single.returncode == 0, f"{name}: one rank trains", single.stderr[-1500:]) &
                    check(parallel.returncode == 0, f"{name}: two data-parallel ranks train and "
                          "the replicas agree at every iteration", parallel.stderr[-3000:])):
                continue
            a, b = losses(one), losses(two)
            check(len(a) == 4 and close(a, b, tolerance), f"{name}: losses and gradient norms "
                  f"within {tolerance} of one rank's", f"{a}\nagainst\n{b}")
            if name == "delayed":
                check(a != b, f"{name}: the FP8 run is not one rank's to the bit (the amaxes' "
                      "grouping differs; a test that cannot tell would pass anything)")
            printed = [l for l in parallel.stderr.splitlines() if l.startswith("iteration 1/4")]
            check(len(printed) == 1, f"{name}: rank 0 alone reports", parallel.stderr[-800:])
        # (c) the two ranks' checkpoint resumes on one rank (not in the sanitizer build, for
        # CI's time: the distributed optimizer's part below saves and resumes across layouts).
        if not sanitizer:
            resume_on_one(binary, model, data, work, mpirun, env, single_env)
        # (d) refusals, on every rank.
        for options, said in [
                (["--tensor-model-parallel-size", "3"], "world size 2 is not a multiple of TP 3"),
                (["--global-batch-size", "6"], "--global-batch-size 6 is not a multiple of "
                 "--micro-batch-size 2 x the data-parallel size 2"),
                (["--world-size", "4"], "--world-size 4, but mpirun started 2 ranks")]:
            refused = run(mpirun + ["train", model, "--data", data, "--train-iters", "1",
                                    "--micro-batch-size", "2", "--seq-length", "64"] + options,
                          env)
            check(refused.returncode != 0 and refused.stderr.count(said) == 2,
                  f"{' '.join(options)} is refused on both ranks", refused.stderr[-1500:])
        # (e) faults (in the sanitizer build the kill alone: the watchdog's hang is the same
        # code, and its run CI's time).
        long_run = ["train", model, "--data", data, "--train-iters", "100000",
                    "--lr-decay-iters", "100000"] + SIZES
        faults = [(signal.SIGSTOP, "rank 0 of 2: no answer for", 60),
                  (signal.SIGKILL, "process rank 1", 30)]
        for sig, said, within in faults[1:] if sanitizer else faults:
            save = os.path.join(work, f"fault-{sig}")
            err, code, seconds = fault(mpirun, long_run, save, sig, env)
            name = signal.Signals(sig).name
            check(code not in (None, 0) and said in err and seconds < within,
                  f"rank 1 {name}: the run stops within {within} s, saying so",
                  f"exit {code} after {seconds} s\n{err[-2000:]}")
            if name == "SIGSTOP":
                check("in MPI_Allreduce over group dp" in err or "MPI_Barrier" in err,
                      "the hang's message names the call and the group", err[-1500:])
            with open(os.path.join(save, "latest_checkpointed_iteration.txt")) as f:
                latest = int(f.read().split()[0])
            resumed = run([binary, "train", model, "--data", data, "--load", save,
                           "--train-iters", str(latest + 1), "--lr-decay-iters", "100000"] +
                          SIZES, single_env)
            check(resumed.returncode == 0 and f"iteration {latest + 1}/" in resumed.stderr,
                  f"rank 1 {name}: the last complete checkpoint (iteration {latest}) loads and "
                  "trains on", resumed.stderr[-1500:])
        shard_fails(mpirun, model, data, work, env)
        distributed_optimizer(binary, model, data, work, mpirun, env, single_env, sanitizer)
        one_rank = run([binary, "train", model, "--data", data, "--train-iters", "1",
                        "--world-size", "2"] + SIZES, single_env)
        check(one_rank.returncode == 2 and "mesh has 2 ranks, but none started 1" in one_rank.stderr,
              "a plan for 2 ranks run as one process is refused, saying how to start it",
              one_rank.stderr[-800:])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
