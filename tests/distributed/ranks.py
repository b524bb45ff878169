"""What the distributed tests share: their arguments and the environment mpirun needs here,
the tokenized data, a run, and the metrics' losses compared step by step."""
import json
import os
import shutil
import subprocess

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


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
