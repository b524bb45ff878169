"""What the distributed tests share: their arguments and the environment mpirun needs here,
the tokenized data, a run, and the metrics' losses compared step by step."""
import json
import os
import shutil
import subprocess

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests

# The parallelisms' tests' runs. Small, for the 2 CPUs CI has: two micro-batches of 2 x 32
# tokens a step.
SIZES = ["--micro-batch-size", "2", "--global-batch-size", "4", "--seq-length", "32",
         "--log-interval", "1"]
STEPS = 10
FP8 = ["--bf16", "--fp8-format", "hybrid"]
# name: (options, loss tolerance, gradient norm tolerance)
PRECISIONS = {"f32": ([], 1e-5, 1e-5),
              "delayed": (FP8, 3e-3, 2e-2),
              "current": (FP8 + ["--fp8-recipe", "current"], 3e-3, 2e-2)}
# What the ranks hold alike, held to the same bits at every iteration.
REPLICAS = ["--check-weight-hash-across-dp-replicas-interval", "1"]


def environment(sanitizer):
    """The environment for runs; in the sanitizer build, leak checking off for mpirun's."""
    env = dict(os.environ)
    # CI runs as root; Open MPI refuses root without these.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if sanitizer:
        # Open MPI's components leave allocations past MPI_Finalize in modules LeakSanitizer
        # cannot name ("<unknown module>"), so leak checking is off in the runs mpirun starts;
        # AddressSanitizer's other checks and UBSan stay on, and the one-rank runs keep it.
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


class Setup:
    """A distributed test's arguments (F8C SOURCE_DIR [--sanitizer-build]) and what follows:
    the environments (`env` for mpirun's runs, `single_env` for one process's) and mpirun's
    command for 2 ranks."""

    def __init__(self, argv):
        self.binary, self.source = argv[1], argv[2]
        self.sanitizer = "--sanitizer-build" in argv[3:]
        self.env, self.single_env = environment(self.sanitizer), environment(False)
        self.mpirun = ["mpirun", "-np", "2", "--oversubscribe", self.binary]


def setup(argv):
    """The test's Setup, or None after saying why it is skipped (no mpirun)."""
    if not shutil.which("mpirun"):
        print("SKIPPED: mpirun is not installed (tools/install-deps.sh installs Open MPI)")
        return None
    return Setup(argv)


def tokenize(s, work):
    """data/fp8-notes.txt tokenized into `work`: the path, or None when f8c tokenize failed
    (with the failure's check made)."""
    from checks import check
    data = os.path.join(work, "tokens.bin")
    tokenized = run([s.binary, "tokenize", os.path.join(s.source, "data", "fp8-notes.txt"),
                     "-o", data], s.single_env)
    return data if check(tokenized.returncode == 0, "tokenize", tokenized.stderr) else None


def run(command, env):
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def losses(path):
    """Each step's (loss, gradient norm) from a metrics file."""
    with open(path) as f:
        return [(r["loss"], r["grad_norm"]) for r in map(json.loads, f) if "loss" in r]


def close(a, b, tolerances):
    """Each step's (loss, gradient norm) of b within its tolerance of a's, relative."""
    return len(a) == len(b) and all(abs(x - y) <= t * abs(x) for p, q in zip(a, b)
                                    for x, y, t in zip(p, q, tolerances))


def worst(a, b):
    """The largest relative difference of the losses and of the gradient norms."""
    return [max((abs(p[i] - q[i]) / abs(p[i]) for p, q in zip(a, b)), default=0.0)
            for i in (0, 1)]


def evaluations(path):
    """Each evaluation's loss from a metrics file."""
    with open(path) as f:
        return [r["eval_loss"] for r in map(json.loads, f) if "eval_loss" in r]


def compare(s, work, train, options, what, tolerance, launch, differs=False, evaluated=False):
    """One rank's run of `train` against `launch`'s with `options` (Setup s): both train (the
    parallel one with REPLICAS), and the losses and gradient norms are within `tolerance`;
    with `differs`, not to the bit (the ranks' sums are in another order); with `evaluated`,
    the evaluation losses within the loss's tolerance too. The parallel run (None when a run
    failed)."""
    from checks import check
    one, many = (os.path.join(work, f"{what}-{n}.jsonl".replace(" ", "_").replace(",", ""))
                 for n in ("one", "many"))
    single = run([s.binary] + train + ["--metrics", one], s.single_env)
    parallel = run(launch + train + options + ["--metrics", many] + REPLICAS, s.env)
    if not (check(single.returncode == 0, f"{what}: one rank trains", single.stderr[-1500:]) &
            check(parallel.returncode == 0, f"{what}: the ranks train, holding the same bits "
                  "of what they hold alike at every iteration", parallel.stderr[-3000:])):
        return None
    a, b = losses(one), losses(many)
    check(len(a) == len(b) > 0 and close(a, b, tolerance), f"{what}: losses and gradient "
          f"norms within {tolerance} of one rank's (worst {worst(a, b)})", f"{a}\nagainst\n{b}")
    if differs:
        check(a != b, f"{what}: the ranks' run is not one rank's to the bit (a test that "
              "cannot tell them apart would pass anything)")
    if evaluated:
        ea, eb = evaluations(one), evaluations(many)
        check(len(ea) == len(eb) > 0 and all(abs(x - y) <= tolerance[0] * abs(x)
                                             for x, y in zip(ea, eb)),
              f"{what}: the evaluation losses within {tolerance[0]} of one rank's",
              f"{ea} against {eb}")
    return parallel
