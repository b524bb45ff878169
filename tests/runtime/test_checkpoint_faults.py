#!/usr/bin/env python3
"""Checkpoints under faults (`f8c train --save`): whatever happens during a save, the latest
complete checkpoint loads and resumes exactly, and every failure names the path and its cause.

(a) SIGKILL at random moments: each trial trains gpt-tiny with a save every iteration and kills
    f8c after a random delay, most often timed into a save (just after an iteration's log line,
    where its save begins). Then latest_checkpointed_iteration.txt names a save that was
    announced or the one under way (never a later one, never a torn folder); that folder's
    tensors and records are byte for byte those of an uninterrupted run at that iteration;
    resuming it (--load, saving on into the same folder) logs the uninterrupted run's losses
    as the same JSON numbers; and after that resume no temporary file is left anywhere in the
    folder: kill -9 leaves one (atomic_file cannot remove it), the next write of the same path
    removes it. A trial killed before the first save completed finds --load saying that there
    is no checkpoint, and a fresh run over the folder then trains and saves as if it were new.
(b) Left-over temporary files: a stale one (its writer dead) beside the next save's file is
    never read by the load and is removed by that save; one a live writer holds is kept.
(c) A full disk mid-save: a tmpfs in a private mount namespace (unshare; as root or in a user
    namespace), sized so that the first save fits and the second runs out of space in its
    optimizer file: f8c exits 1 naming that file (in the save's staging folder,
    iter_0000002.saving) and "No space left on device", the folder keeps the first save as its
    latest, with no temporary file and no folder of the failed save; it loads and resumes
    exactly. The same with RLIMIT_FSIZE (EFBIG, "File too large"), which needs nothing and
    always runs.
(d) A read-only folder mid-run: once the first save is announced, the checkpoint folder is
    made read-only (mode 0555, f8c run as user nobody when this runs as root, since root ignores
    permission bits: "Permission denied"; with the mount namespace also a read-only bind mount
    of it: "Read-only file system"); a later save fails naming the folder and the cause, the
    latest record names a whole checkpoint of the run, which resumes exactly.
(e) Before training: --save naming a regular file, a folder whose parent is a file or is
    missing, and a read-only folder are refused before any iteration runs, naming the path.
(f) A save of the iteration that the latest record names (a fresh run over an old folder)
    that fails half way (a full disk) leaves that checkpoint loadable: the save writes into a
    staging folder and exchanges it for the old one in one rename.

Usage: test_checkpoint_faults.py F8C SOURCE_DIR [SEED] [--sanitizer-build]
The seed (printed) makes every random choice: the delays, the trial kinds, the run's --seed.
"""
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

# Eight iterations of the smallest model and a save after each: ~10 ms a step, ~20 ms a save
# (3.4 MB of weights, 6.8 MB of optimizer state) after ~0.6 s of compiling. A trial (a killed
# run and a resumed one) takes ~1.3 s on an idle 2-core machine, more beside CI's other tests:
# 16 trials a run (the seed is new each run, so CI's runs together try many more moments), 4 in
# the sanitizer build, ~2.5 times slower.
ITERS = 8
TRIALS = 16
SANITIZER_TRIALS = 4
SMALL = ["--micro-batch-size", "2", "--seq-length", "16"]
LATEST = "latest_checkpointed_iteration.txt"
FILES = ("weights.safetensors", "optimizer.safetensors")
TEMP = re.compile(r"\.tmp\.[A-Za-z0-9]{6}$")
NOBODY = 65534
# Failures of known bugs, reported and not yet fixed: printed as XFAIL, not counted.


class Setup:
    def __init__(self, f8c, model, tokens, work, seed):
        self.f8c, self.model, self.tokens, self.work, self.seed = f8c, model, tokens, work, seed
        self.resumes = 0
        # Where user nobody (see as_writer) may write its metrics.
        self.scratch = os.path.join(work, "scratch")
        os.makedirs(self.scratch)
        os.chmod(self.scratch, 0o777)

    def args(self, iters, *extra):
        """The training command: fixed schedule (decay over ITERS), logging every step."""
        return [self.f8c, "train", self.model, "--data", self.tokens, *SMALL, "--train-iters",
                str(iters), "--lr-decay-iters", str(ITERS), "--log-interval", "1", "--seed",
                str(self.seed), *extra]

    def path(self, *names):
        return os.path.join(self.work, *names)


def run(args, timeout=120, **kwargs):
    start = time.monotonic()
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    result.seconds = time.monotonic() - start
    result.output = result.stdout + result.stderr
    return result


def raw_losses(path):
    """Each step's loss as the JSON text the metrics file holds (for exact comparisons)."""
    losses = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                match = re.search(r'"step":\s*(\d+).*?"loss":\s*([^,}\s]+)', line)
                if match:
                    losses[int(match.group(1))] = match.group(2)
    return losses


def read_safetensors(path):
    """(the header's tensors, the metadata, the data area) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    return header, metadata, blob[8 + n:]


def same_checkpoint(got_folder, want_folder):
    """'' when the two iteration folders hold the same tensors and records (all but the save
    id, which each save makes anew), else what differs."""
    for name in FILES:
        try:
            got, want = (read_safetensors(os.path.join(d, name)) for d in (got_folder, want_folder))
        except (OSError, ValueError) as error:
            return f"{name}: {error}"
        if got[0] != want[0]:
            return f"{name}: the tensors' names, dtypes, shapes or offsets differ"
        if got[2] != want[2]:
            return f"{name}: the tensor data differ"
        strip = lambda m: {k: v for k, v in m.items() if k != "save_id"}  # noqa: E731
        if strip(got[1]) != strip(want[1]):
            return f"{name}: metadata {strip(got[1])} != {strip(want[1])}"
    return ""


def latest_of(folder):
    try:
        with open(os.path.join(folder, LATEST)) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        return None


def temporaries(folder):
    found = []
    for root, _, names in os.walk(folder):
        found += [os.path.join(root, n) for n in names if TEMP.search(n)]
    return found


def copy_checkpoint(source, folder, iteration):
    """A checkpoint folder whose latest save is `source`'s iter_N (as its save left it)."""
    name = f"iter_{iteration:07d}"
    os.makedirs(folder, exist_ok=True)
    shutil.copytree(os.path.join(source, name), os.path.join(folder, name))
    with open(os.path.join(folder, LATEST), "w") as f:
        f.write(f"{iteration}\n")


def expect_error(result, what, words):
    """Exit status 1 or 2 (an error, not a signal) and `words` in what it printed."""
    missing = [w for w in words if w not in result.output]
    ok = check(result.returncode in (1, 2) and not missing, what,
               f"exit {result.returncode}, lacks {missing}:\n{result.output}")
    lines = [l for l in result.output.splitlines() if "error" in l]
    print(f"  {what}: exit {result.returncode}: {lines[0] if lines else result.output[:200]}")
    return ok


def expect_resume(s, folder, start, iters, what, reference, *extra, **kwargs):
    """--load `folder` (at iteration `start`) up to `iters`: the reference run's losses."""
    s.resumes += 1
    metrics = s.path(f"resume-{s.resumes}.jsonl")
    result = run(s.args(iters, "--load", folder, "--metrics", metrics, *extra), **kwargs)
    if not check(result.returncode == 0, f"{what}: the resume runs", result.output):
        return False
    got = raw_losses(metrics)
    want = {k: v for k, v in reference.items() if start < k <= iters}
    return check(got == want, f"{what}: the resume from iteration {start} logs the uninterrupted "
                 f"run's losses", f"resumed {got}\nuninterrupted {want}")


# ---- the uninterrupted run ------------------------------------------------------------------


def reference_run(s):
    """ITERS iterations saving each: the checkpoints, losses and timings the trials compare to."""
    folder, metrics = s.path("reference"), s.path("reference.jsonl")
    start = time.monotonic()
    process = subprocess.Popen(s.args(ITERS, "--save", folder, "--save-interval", "1",
                                      "--metrics", metrics),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    logged, saved = {}, {}
    for line in process.stderr:
        at = time.monotonic() - start
        if (m := re.match(r"iteration (\d+)/\d+:", line)):
            logged[int(m.group(1))] = at
        elif (m := re.match(r"iteration (\d+): saved", line)):
            saved[int(m.group(1))] = at
    process.wait()
    losses = raw_losses(metrics)
    ok = check(process.returncode == 0 and sorted(losses) == list(range(1, ITERS + 1)) and
               sorted(saved) == list(range(1, ITERS + 1)), "the uninterrupted run",
               f"exit {process.returncode}, steps {sorted(losses)}, saves {sorted(saved)}")
    if not ok:
        return None
    cycle = sorted(logged[k + 1] - logged[k] for k in range(1, ITERS))[ITERS // 2 - 1]
    save = sorted(saved[k] - logged[k] for k in range(1, ITERS + 1))[ITERS // 2]
    sizes = {n: os.path.getsize(os.path.join(folder, "iter_0000001", n)) for n in FILES}
    print(f"uninterrupted run: {time.monotonic() - start:.2f} s; first step logged at "
          f"{logged[1]:.3f} s, an iteration every {cycle * 1e3:.1f} ms, a save "
          f"{save * 1e3:.1f} ms; checkpoint files {sizes}")
    return {"folder": folder, "losses": losses, "logged": logged, "saved": saved,
            "cycle": cycle, "sizes": sizes}


# ---- (a) SIGKILL ------------------------------------------------------------------------------


def killed_run(s, folder, rng, ref):
    """Starts a run saving every iteration into `folder` and SIGKILLs it: after a random delay
    from the start (one trial in six: before or during the first save), or a random part of an
    iteration after a random iteration's log line. Returns (how, exit status, saves announced)."""
    process = subprocess.Popen(s.args(ITERS, "--save", folder, "--save-interval", "1"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, seen = [], {}
    events = {k: threading.Event() for k in range(1, ITERS + 1)}

    def read():
        for line in process.stderr:
            lines.append(line)
            if (m := re.match(r"iteration (\d+)/\d+:", line)) and int(m.group(1)) in events:
                events[int(m.group(1))].set()
        for event in events.values():  # the end of the output: nothing more to wait for
            event.set()

    reader = threading.Thread(target=read)
    reader.start()
    if rng.random() < 1 / 6:
        delay = rng.uniform(0, ref["saved"][1])
        how = f"{delay * 1e3:.0f} ms after the start"
        time.sleep(delay)
    else:
        k = rng.randint(1, ITERS)
        delay = rng.uniform(0, 1.1 * ref["cycle"])
        how = f"{delay * 1e3:.1f} ms after iteration {k}'s log line"
        events[k].wait(timeout=60)
        time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()
    reader.join()
    saved = [int(m.group(1)) for l in lines if (m := re.match(r"iteration (\d+): saved", l))]
    return how, process.returncode, max(saved, default=0)


def kill_trial(s, trial, rng, ref, tally):
    folder = s.path("kill", f"trial{trial:02d}")
    how, status, announced = killed_run(s, folder, rng, ref)
    latest = latest_of(folder)
    left = temporaries(folder)
    tally["left"] += len(left)
    what = f"(a) trial {trial} (killed {how})"
    line = f"  trial {trial:2d}: killed {how}: exit {status}, save {announced} announced, " \
           f"latest {latest}, {len(left)} temporary file(s) left"
    check(status in (-signal.SIGKILL, 0), f"{what}: f8c died of the SIGKILL or had finished",
          f"exit {status}")
    if latest is None:
        print(line + "; no checkpoint")
        tally["none"] += 1
        check(announced == 0, f"{what}: a save was announced but no latest record exists",
              f"announced {announced}")
        no_checkpoint(s, folder, what, ref)
        shutil.rmtree(folder, ignore_errors=True)
        return
    tally["latest"].add(latest)
    # The save announced last is complete; the one under way may have completed too.
    if not check(announced <= latest <= min(announced + 1, ITERS), f"{what}: the latest record "
                 f"names the last save announced or the one under way",
                 f"announced {announced}, latest {latest}"):
        return
    iteration = os.path.join(folder, f"iter_{latest:07d}")
    difference = same_checkpoint(iteration, os.path.join(ref["folder"], f"iter_{latest:07d}"))
    check(not difference, f"{what}: iter_{latest:07d} is the uninterrupted run's checkpoint",
          difference)
    until = min(latest + 2, ITERS)
    if latest == ITERS:
        result = run(s.args(ITERS, "--load", folder))
        check(result.returncode == 0 and f"already at iteration {ITERS}" in result.output,
              f"{what}: the complete run's last checkpoint loads", result.output)
    else:
        # Saving on into the same folder: the saves after a kill, over what it left.
        expect_resume(s, folder, latest, until, what, ref["losses"], "--save", folder,
                      "--save-interval", "1")
        check(latest_of(folder) == until, f"{what}: the resumed run's saves are the latest",
              f"latest {latest_of(folder)}")
    remaining = temporaries(folder)
    check(not remaining, f"{what}: no temporary file is left once the killed save's paths are "
          f"written again", f"{remaining}")
    print(line + f"; resumed to {until}, {len(remaining)} left after")
    shutil.rmtree(folder, ignore_errors=True)


def no_checkpoint(s, folder, what, ref):
    """No save completed: --load says so, naming the folder; a new run over it starts afresh."""
    result = run(s.args(2, "--load", folder))
    said = "no checkpoint in" in result.output or "cannot load a checkpoint from" in result.output
    check(result.returncode == 1 and folder in result.output and said,
          f"{what}: --load says there is no checkpoint, naming the folder", result.output)
    metrics = s.path("fresh.jsonl")
    result = run(s.args(1, "--save", folder, "--metrics", metrics))
    check(result.returncode == 0 and raw_losses(metrics) == {1: ref["losses"][1]},
          f"{what}: a new run over the folder trains", result.output)
    check(latest_of(folder) == 1 and not temporaries(folder) and
          not same_checkpoint(os.path.join(folder, "iter_0000001"),
                              os.path.join(ref["folder"], "iter_0000001")),
          f"{what}: ... and saves iteration 1 over what the kill left",
          f"latest {latest_of(folder)}, temporaries {temporaries(folder)}")


def test_kills(s, ref, trials, rng):
    print(f"(a) {trials} runs killed with SIGKILL during their saves")
    start = time.monotonic()
    tally = {"left": 0, "none": 0, "latest": set()}
    os.makedirs(s.path("kill"))
    for trial in range(trials):
        kill_trial(s, trial, rng, ref, tally)
    print(f"(a) {trials} trials in {time.monotonic() - start:.1f} s: {tally['none']} before any "
          f"checkpoint, latest iterations {sorted(tally['latest'])}; the kills left "
          f"{tally['left']} temporary file(s), which the resumed runs' saves removed")


# ---- (b) left-over temporary files ----------------------------------------------------------


def test_stale_temporaries(s, ref):
    import fcntl
    folder = s.path("stale")
    copy_checkpoint(ref["folder"], folder, 4)
    # What a save of iteration 5 killed half way leaves: iter_0000005 with a torn weights file
    # under its temporary name, and a latest record under its own saying 5 was done.
    os.makedirs(os.path.join(folder, "iter_0000005"))
    stale = os.path.join(folder, "iter_0000005", "weights.safetensors.tmp.Ab3xY9")
    with open(os.path.join(ref["folder"], "iter_0000005", "weights.safetensors"), "rb") as f:
        torn = f.read()
    with open(stale, "wb") as f:
        f.write(torn[:len(torn) // 2])
    stale_latest = os.path.join(folder, LATEST + ".tmp.Zz9Zz9")
    with open(stale_latest, "w") as f:
        f.write("5\n")
    # A live writer's temporary file, beside the latest record (a save of iteration 5 puts a
    # new folder in place of iter_0000005 whole, whatever it held).
    live = os.path.join(folder, LATEST + ".tmp.Qw7eR2")
    holder = open(live, "wb")  # a writer still at work: it holds the lock atomic_file takes
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        expect_resume(s, folder, 4, 6, "(b) temporary files beside the checkpoint",
                      ref["losses"], "--save", folder, "--save-interval", "1")
        gone = not os.path.exists(stale) and not os.path.exists(stale_latest)
        check(gone and os.path.exists(live), "(b) the next save of each path removes the stale "
              "temporary files of dead writers and keeps a live writer's",
              f"left: {temporaries(folder)}")
    finally:
        holder.close()
    print(f"(b) a torn temporary file and a stale latest record were ignored by the load and "
          f"removed by the next saves; a live writer's was kept")


# ---- (c) a full disk --------------------------------------------------------------------------


def namespace_command():
    """The unshare command that gives a private mount namespace (none: why not)."""
    if not shutil.which("unshare"):
        return None, "no unshare command"
    command = ["unshare", "--mount"] if os.geteuid() == 0 else \
        ["unshare", "--user", "--map-root-user", "--mount"]
    probe = tempfile.mkdtemp(prefix="f8c-ns-")
    try:
        result = run(command + ["sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{probe}'"],
                     timeout=30)
    finally:
        os.rmdir(probe)
    if result.returncode != 0:
        return None, f"{' '.join(command)} cannot mount a tmpfs here: {result.output.strip()}"
    return command, ""


def quote(args):
    return " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)


def in_namespace(namespace, script, name):
    """Runs the shell `script` in a private mount namespace; its mounts end with it."""
    path = os.path.join(os.path.dirname(name), os.path.basename(name) + ".sh")
    with open(path, "w") as f:
        f.write("set -u\n" + script)
    return run(namespace + ["sh", path], timeout=180)


def result_of(out):
    """What a command in a namespace script printed to `out`, and its exit status (the line
    that `echo $?` added after it)."""
    with open(out) as f:
        lines = f.read().splitlines()
    result = subprocess.CompletedProcess([], int(lines[-1]) if lines and lines[-1].isdigit()
                                         else -1)
    result.output = "\n".join(lines[:-1])
    return result


def check_failed_save(s, ref, folder, result, failed, reason, what):
    """The save of iteration 2 failed in `failed` for `reason`: iteration 1 is the latest,
    intact, and resumes; nothing temporary is left."""
    expect_error(result, f"{what}: f8c stops, naming the file and the cause",
                 [failed, reason])
    check(latest_of(folder) == 1, f"{what}: the first save is still the latest",
          f"latest {latest_of(folder)}")
    difference = same_checkpoint(os.path.join(folder, "iter_0000001"),
                                 os.path.join(ref["folder"], "iter_0000001"))
    check(not difference, f"{what}: the first save is intact", difference)
    check(not temporaries(folder), f"{what}: no temporary file is left",
          f"{temporaries(folder)}")


def tmpfs_size_k(ref):
    """A disk on which one checkpoint fits, and the next one's weights (half its optimizer
    file's size: Adam's two moments) but not its optimizer file."""
    sizes = ref["sizes"]
    return (sum(sizes.values()) + sizes["weights.safetensors"] * 3 // 2) // 1024


def test_full_disk(s, ref, namespace, why):
    sizes = ref["sizes"]
    one = sum(sizes.values())
    size_k = tmpfs_size_k(ref)
    if namespace:
        mount = s.path("disk")
        folder = os.path.join(mount, "ckpt")
        copy = s.path("disk-copy")
        os.makedirs(mount)
        os.makedirs(copy)
        out = s.path("disk.out")
        script = (f"mount -t tmpfs -o size={size_k}k tmpfs {quote([mount])} || exit 90\n"
                  f"{quote(s.args(3, '--save', folder, '--save-interval', '1'))} "
                  f">{quote([out])} 2>&1; echo $? >>{quote([out])}\n"
                  f"cp -a {quote([folder + '/.'])} {quote([copy])}\n")
        result = in_namespace(namespace, script, s.path("disk"))
        failing = result_of(out)
        print(f"(c) a {size_k} KiB tmpfs (a checkpoint is {one // 1024} KiB); "
              f"namespace exit {result.returncode}")
        if check(result.returncode == 0, "(c) the namespace script", result.output):
            what = "(c) a full disk"
            check_failed_save(s, ref, copy, failing,
                              os.path.join(folder, "iter_0000002.saving", "optimizer.safetensors"),
                              "No space left on device", what)
            expect_resume(s, copy, 1, 3, what, ref["losses"])
            # The second save wrote into its staging folder, which the failure removed.
            left = sorted(n for n in os.listdir(copy) if n.startswith("iter_0000002"))
            check(not left, f"{what}: the failed save leaves no folder of its iteration", f"{left}")
    else:
        print(f"(c) SKIP the full tmpfs: {why}; RLIMIT_FSIZE below stands in for it")
    # The file size limit: a save whose optimizer file passes it fails with EFBIG.
    folder = s.path("fsize")
    copy_checkpoint(ref["folder"], folder, 1)
    limit = sizes["weights.safetensors"] * 3 // 2

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    what = "(c) RLIMIT_FSIZE"
    result = run(s.args(3, "--load", folder, "--save", folder, "--save-interval", "1"),
                 preexec_fn=limited)
    check_failed_save(s, ref, folder, result, os.path.join(folder, "iter_0000002.saving",
                                                           "optimizer.safetensors"),
                      "File too large", what)
    expect_resume(s, folder, 1, 3, what, ref["losses"])


# ---- (d) a read-only folder -------------------------------------------------------------------


def as_writer():
    """preexec_fn that makes f8c a user without root's bypass of permission bits."""
    if os.geteuid() != 0:
        return None
    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return drop


def writer_can_run(s):
    """'' when the user of as_writer can run f8c on the model and tokens, else why not (a
    build or source folder that only its owner may enter)."""
    if os.geteuid() != 0:
        return ""
    probe = run(["sh", "-c", 'test -x "$0" && test -r "$1" && test -r "$2"', s.f8c, s.model,
                 s.tokens], preexec_fn=as_writer())
    return "" if probe.returncode == 0 else \
        f"user nobody cannot run {s.f8c} on {s.model} and {s.tokens}"


def writer_owns(path):
    if os.geteuid() == 0:
        for root, dirs, files in os.walk(path):
            for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                os.chown(name, NOBODY, NOBODY)


def test_read_only(s, ref, namespace, why):
    who = "as user nobody" if os.geteuid() == 0 else "as this user"
    cannot = writer_can_run(s)
    if cannot:
        print(f"(d) SKIP the read-only folder {who}: {cannot}")
    else:
        read_only_folder(s, ref, who)
    if not namespace:
        print(f"(d) SKIP the read-only bind mount: {why}")
        return
    read_only_mount(s, ref, namespace)


def latest_whole(ref, folder, what):
    """The iteration of the latest record after a run stopped mid-way, which must be one of its
    saves and whole (the uninterrupted run's checkpoint); None when there is none."""
    latest = latest_of(folder)
    check(latest is not None and 1 <= latest < ITERS, f"{what}: a save before it is the latest",
          f"latest {latest}")
    if latest:
        name = f"iter_{latest:07d}"
        difference = same_checkpoint(os.path.join(folder, name),
                                     os.path.join(ref["folder"], name))
        check(not difference, f"{what}: the latest checkpoint is whole", difference)
    return latest


def read_only_mid_run(s, ref, folder, command, make_read_only, reason, what, **kwargs):
    """Trains ITERS iterations saving each; once the first save is announced, `make_read_only`
    makes the checkpoint folder read-only: a later save fails, naming a path in the folder and
    `reason`; the latest record still names a complete checkpoint, the run's, which resumes."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, **kwargs)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("iteration 1: saved"):
            make_read_only()
            break
    lines += process.stderr.readlines()
    process.wait()
    result = subprocess.CompletedProcess(command, process.returncode)
    result.output = "".join(lines)
    expect_error(result, f"{what}: f8c stops, naming the folder and the cause", [folder, reason])
    return latest_whole(ref, folder, what)


def read_only_folder(s, ref, who):
    folder = s.path("readonly")
    os.makedirs(folder)
    writer_owns(folder)
    what = f"(d) a checkpoint folder made read-only mid-run ({who})"
    # As root the folder's owner (nobody) loses its write permission; otherwise this user.
    latest = read_only_mid_run(s, ref, folder, s.args(ITERS, "--save", folder,
                                                      "--save-interval", "1"),
                               lambda: os.chmod(folder, 0o555), "Permission denied", what,
                               preexec_fn=as_writer())
    os.chmod(folder, 0o755)
    if latest:
        expect_resume(s, folder, latest, min(latest + 2, ITERS), what, ref["losses"])


def read_only_mount(s, ref, namespace):
    """The file system goes read-only mid-run: f8c runs in a mount namespace whose script
    bind-mounts the checkpoint folder read-only over itself once the first save is there."""
    folder = s.path("readonly-mount")
    os.makedirs(folder)
    out = s.path("readonly-mount.out")
    first = os.path.join(folder, LATEST)
    script = (f"{quote(s.args(ITERS, '--save', folder, '--save-interval', '1'))} "
              f">{quote([out])} 2>&1 &\n"
              f"while [ ! -f {quote([first])} ]; do sleep 0.005; done\n"
              f"mount --bind {quote([folder])} {quote([folder])} || exit 90\n"
              # A remount to read-only is refused (EBUSY) while a file of the mount is open
              # for writing, which a save in progress holds: tried again until a gap.
              f"n=0; until mount -o remount,bind,ro {quote([folder])} 2>/dev/null; do "
              f"n=$((n + 1)); [ $n -lt 2000 ] || exit 91; sleep 0.005; done\n"
              f"wait $!; echo $? >>{quote([out])}\n")
    ran = in_namespace(namespace, script, out)
    if not check(ran.returncode == 0, "(d) the read-only bind mount's namespace script",
                 ran.output):
        return
    result = result_of(out)
    what = "(d) a checkpoint folder's file system made read-only mid-run"
    expect_error(result, f"{what}: f8c stops, naming the folder and the cause",
                 [folder, "Read-only file system"])
    latest = latest_whole(ref, folder, what)
    if latest:
        expect_resume(s, folder, latest, min(latest + 2, ITERS), what, ref["losses"])


# ---- (e) refused before training ------------------------------------------------------------


def test_before_training(s):
    print("(e) --save that cannot hold checkpoints, refused before any step")
    afile = s.path("a-file")
    with open(afile, "w") as f:
        f.write("not a folder\n")
    readonly = s.path("readonly-from-start")
    os.makedirs(readonly)
    writer_owns(readonly)
    os.chmod(readonly, 0o555)
    cases = [(afile, "a regular file", ["is not a folder"], None),
             (os.path.join(afile, "ckpt"), "under a regular file", ["Not a directory"], None),
             (s.path("missing", "parent", "ckpt"), "under a missing folder",
              ["No such file or directory"], None)]
    cannot = writer_can_run(s)
    if cannot:
        print(f"(e) SKIP a read-only folder: {cannot}")
    else:
        cases.append((readonly, "a read-only folder", ["Permission denied"], as_writer()))
    for path, what, words, preexec in cases:
        metrics = os.path.join(s.scratch, "before.jsonl")
        if os.path.exists(metrics):
            os.unlink(metrics)
        result = run(s.args(3, "--save", path, "--save-interval", "1", "--metrics", metrics),
                     preexec_fn=preexec)
        expect_error(result, f"(e) --save {what}", [path] + words)
        check(not raw_losses(metrics) and not re.search(r"iteration \d+/", result.output),
              f"(e) --save {what}: no step ran", result.output)
    check(open(afile).read() == "not a folder\n", "(e) the regular file is left as it was")


# ---- (f) a save over the latest checkpoint's own folder ------------------------------


def test_resave_of_latest(s, ref, namespace):
    """A fresh run (no --load) over a folder whose latest save is iteration 2 saves iteration 2
    again; the disk fills in its optimizer file. The old iteration 2 should still load."""
    if not namespace:
        return
    mount, copy = s.path("resave"), s.path("resave-copy")
    os.makedirs(mount)
    os.makedirs(copy)
    folder = os.path.join(mount, "ckpt")
    out = s.path("resave.out")
    old = os.path.join(ref["folder"], "iter_0000002")
    script = (f"mount -t tmpfs -o size={tmpfs_size_k(ref)}k tmpfs {quote([mount])} || exit 90\n"
              f"mkdir {quote([folder])} && cp -a {quote([old])} {quote([folder])} && "
              f"echo 2 >{quote([os.path.join(folder, LATEST)])} || exit 91\n"
              f"{quote(s.args(2, '--save', folder))} >{quote([out])} 2>&1\n"
              f"cp -a {quote([folder + '/.'])} {quote([copy])}\n")
    ran = in_namespace(namespace, script, out)
    if not check(ran.returncode == 0, "(f) the namespace script", ran.output):
        return
    difference = same_checkpoint(os.path.join(copy, "iter_0000002"),
                                 os.path.join(ref["folder"], "iter_0000002"))
    result = run(s.args(3, "--load", copy))
    ok = latest_of(copy) == 2 and result.returncode == 0 and not difference
    detail = f"latest {latest_of(copy)}; {difference + '; ' if difference else ''}load: " \
             f"{result.output.strip()}"
    what = "(f) a failed save of the latest record's own iteration leaves it loadable"
    check(ok, what, detail)


def main():
    argv = [a for a in sys.argv[1:] if a != "--sanitizer-build"]
    trials = SANITIZER_TRIALS if "--sanitizer-build" in sys.argv else TRIALS
    f8c, source = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    seed = int(argv[2]) if len(argv) > 2 else random.SystemRandom().randrange(1, 2**31)
    print(f"seed {seed} (rerun with: test_checkpoint_faults.py F8C SOURCE_DIR {seed})")
    rng = random.Random(seed)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="f8c-faults-") as work:
        os.chmod(work, 0o755)  # user nobody reads the tokens and writes where it is let
        tokens = os.path.join(work, "tokens.bin")
        result = run([f8c, "tokenize", os.path.join(source, "data", "fp8-notes.txt"), "-o",
                      tokens])
        if not check(result.returncode == 0, "f8c tokenize", result.output):
            return finish()
        s = Setup(f8c, os.path.join(source, "models", "gpt-tiny.json"), tokens, work,
                  rng.randrange(1, 2**31))
        ref = reference_run(s)
        if ref is None:
            return finish()
        namespace, why = namespace_command()
        print(f"mount namespace: {' '.join(namespace) if namespace else 'none, ' + why}")
        test_kills(s, ref, trials, rng)
        test_stale_temporaries(s, ref)
        test_full_disk(s, ref, namespace, why)
        test_read_only(s, ref, namespace, why)
        test_before_training(s)
        test_resave_of_latest(s, ref, namespace)
    print(f"{time.monotonic() - start:.1f} s in all")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
