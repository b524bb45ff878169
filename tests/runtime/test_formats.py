"""The runtime's file formats against their reference implementations, on fresh random data:

  .npy         numpy.save's files copied through f8c's reader and writer come out byte for
               byte the same (so f8c writes what numpy writes, and reads what numpy writes:
               versions 1.0, 2.0 and 3.0, every dtype, rank 0 to 8, zero-size arrays); what f8c
               refuses (Fortran order, big-endian, ml_dtypes' opaque 'V' arrays) exits 1 naming
               the problem
  safetensors  files written by the safetensors package (every dtype f8c has, bf16 and FP8
               through ml_dtypes, metadata) copied through f8c read back the same with
               safetensors.numpy.load_file and safetensors.deserialize, and are byte for byte the
               file the package wrote
  tokens       llm.c's files as its data scripts write them (numpy), raw uint16 and uint32 files,
               and llm.c's Llama 3 files, copied into llm.c's format; torn files refused
  split        f8_tokens_split against Megatron's arithmetic, written out here in Python
  tokenize     `f8c tokenize` on random bytes: llm.c's header and one token per byte, read with
               numpy; the errors a user meets exit 1 or 2

The tools run in the sanitizer build too; a sanitizer report or a signal is a failure. The seed
comes from the clock and is printed; F8C_TEST_SEED=N repeats a run.

usage: test_formats.py FORMAT_TOOL F8C_BINARY
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy
from numpy.lib import format as npy_format

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

tool, f8c = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
seed = int(os.environ.get("F8C_TEST_SEED", time.time_ns() % 2**31))
print(f"seed {seed} (F8C_TEST_SEED={seed} repeats this run)")
rng = np.random.default_rng(seed)
root = tempfile.mkdtemp(prefix="f8c-formats-")
atexit.register(shutil.rmtree, root, True)


def path(name):
    return os.path.join(root, name)


def run(what, *args):
    """Runs a program; a signal, a sanitizer report or a hang is a failure. (exit, out, err)."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: hangs")
        return -1, "", ""
    report = "runtime error:" in done.stderr or "Sanitizer" in done.stderr
    check(done.returncode >= 0 and not report, f"{what}: crashed or a sanitizer report",
          done.stderr)
    return done.returncode, done.stdout, done.stderr


def no_temporary_files(what):
    left = [name for name in os.listdir(root) if ".tmp." in name]
    check(not left, f"{what}: temporary files left", str(left))


def random_array(dtype, shape):
    """Random contents, every bit pattern for floats (NaNs included); 0/1 for bool."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return np.frombuffer(rng.bytes(n), dtype=dtype).reshape(shape).copy()


def random_shape(max_rank=4):
    rank = int(rng.integers(0, max_rank + 1))
    dims = [int(rng.integers(1, 6)) for _ in range(rank)]
    if rank and rng.random() < 0.15:
        dims[int(rng.integers(0, rank))] = 0
    return tuple(dims)


def read_bytes(name):
    with open(name, "rb") as f:
        return f.read()


# ---- .npy -------------------------------------------------------------------------------------
NPY_DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_]


def test_npy():
    shapes = [(), (0,), (1, 2, 1, 3, 1, 2, 1, 2), (123456789012, 0)]
    shapes += [random_shape() for _ in range(6)]
    for dtype in NPY_DTYPES:
        for shape in shapes:
            a = random_array(dtype, shape)
            what = f"npy {np.dtype(dtype).str} {shape}"
            np.save(path("a.npy"), a)
            code, _, err = run(what, tool, "npy", path("a.npy"), path("b.npy"))
            if not check(code == 0, f"{what}: f8c reads numpy's file", err):
                continue
            check(read_bytes(path("a.npy")) == read_bytes(path("b.npy")),
                  f"{what}: f8c writes what numpy.save writes, byte for byte")
            b = np.load(path("b.npy"))
            check(b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes(),
                  f"{what}: numpy reads f8c's file")
    # Versions 2.0 and 3.0 read; rewritten as 1.0.
    a = random_array(np.float32, (3, 5))
    for version in [(2, 0), (3, 0)]:
        with open(path("v.npy"), "wb") as f:
            npy_format.write_array(f, a, version=version)
        code, _, err = run(f"npy version {version}", tool, "npy", path("v.npy"), path("w.npy"))
        check(code == 0 and np.load(path("w.npy")).tobytes() == a.tobytes(),
              f"npy version {version}: read", err)
    # What f8c refuses: the tool exits 1 and says why; nothing is written.
    refused = [
        ("Fortran", np.asfortranarray(random_array(np.float32, (3, 4)))),
        ("big-endian", random_array(np.float32, (4,)).astype(">f4")),
        ("opaque", random_array(ml_dtypes.bfloat16, (4,))),
        ("no f8c type", random_array(np.uint16, (4,))),
        ("objects", np.array([1, "x"], dtype=object)),
    ]
    for words, array in refused:
        np.save(path("r.npy"), array, allow_pickle=True)
        if os.path.exists(path("s.npy")):
            os.unlink(path("s.npy"))
        code, _, err = run(f"npy refuses {words}", tool, "npy", path("r.npy"), path("s.npy"))
        check(code == 1 and words in err and "r.npy" in err and not os.path.exists(path("s.npy")),
              f"npy refuses {words}", err)
    no_temporary_files("npy")


# ---- safetensors ------------------------------------------------------------------------------
# numpy dtypes by the names safetensors.TensorSpec takes; the last four through ml_dtypes.
SAFETENSORS_DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int8, np.uint8,
                      np.bool_, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                      ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu]
STANDARD = 8  # the first 8 are the ones safetensors.numpy.load_file gives back


def serialize(tensors, metadata):
    """Bytes of a safetensors file, by the package (TensorSpec carries ml_dtypes' types)."""
    specs = {name: safetensors.TensorSpec(dtype=a.dtype.name, shape=list(a.shape),
                                          data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, a in tensors.items()}
    return bytes(safetensors.serialize(specs, metadata=metadata))


def test_safetensors():
    for round_ in range(6):
        tensors = {}
        for i, dtype in enumerate(SAFETENSORS_DTYPES if round_ else SAFETENSORS_DTYPES[:STANDARD]):
            name = f"layers.{int(rng.integers(0, 100))}.w{i}" + ("ü" if rng.random() < 0.2 else "")
            tensors[name] = random_array(dtype, random_shape())
        tensors["scalar"] = random_array(np.float32, ())
        metadata = {"format": "pt"} if round_ % 2 else None  # one key: the package's order is
        what = f"safetensors round {round_}"                 # then the file's order
        with open(path("a.safetensors"), "wb") as f:
            f.write(serialize(tensors, metadata))
        code, _, err = run(what, tool, "safetensors", path("a.safetensors"),
                           path("b.safetensors"))
        if not check(code == 0, f"{what}: f8c reads the package's file", err):
            continue
        check(read_bytes(path("a.safetensors")) == read_bytes(path("b.safetensors")),
              f"{what}: f8c writes the file the package wrote, byte for byte")
        back = dict(safetensors.deserialize(read_bytes(path("b.safetensors"))))
        check(set(back) == set(tensors), f"{what}: the same names")
        for name, a in tensors.items():
            entry = back.get(name)
            check(entry is not None and list(entry["shape"]) == list(a.shape) and
                  bytes(entry["data"]) == a.tobytes(), f"{what}: {name} read back")
        if round_ == 0:
            loaded = safetensors.numpy.load_file(path("b.safetensors"))
            for name, a in tensors.items():
                check(name in loaded and loaded[name].dtype == a.dtype and
                      loaded[name].tobytes() == a.tobytes(), f"{what}: load_file {name}")
        with safetensors.safe_open(path("b.safetensors"), framework="np") as f:
            check(f.metadata() == metadata, f"{what}: metadata", str(f.metadata()))
    # Many metadata keys: the package's order is a hash map's, so compare what is read.
    metadata = {f"key{i}": str(rng.integers(0, 10**9)) for i in range(10)}
    tensors = {"a": random_array(np.int32, (3, 3))}
    safetensors.numpy.save_file(tensors, path("a.safetensors"), metadata=metadata)
    code, _, err = run("safetensors metadata", tool, "safetensors", path("a.safetensors"),
                       path("b.safetensors"))
    with safetensors.safe_open(path("b.safetensors"), framework="np") as f:
        check(code == 0 and f.metadata() == metadata, "safetensors: metadata", err)
    # Torn and foreign files exit 1 naming the file, with a hint.
    good = read_bytes(path("a.safetensors"))
    cuts = [0, 7, 8, 20, len(good) - 1] + [int(c) for c in rng.integers(9, len(good), 5)]
    for cut in cuts:
        with open(path("t.safetensors"), "wb") as f:
            f.write(good[:cut])
        code, _, err = run(f"safetensors cut at {cut}", tool, "safetensors",
                           path("t.safetensors"), path("u.safetensors"))
        check(code == 1 and "t.safetensors" in err and ("torn" in err or cut < 8) and
              "HINT" in err, f"safetensors cut at {cut}: refused", err)
    np.save(path("n.npy"), random_array(np.float32, (4,)))
    code, _, err = run("safetensors foreign", tool, "safetensors", path("n.npy"),
                       path("u.safetensors"))
    check(code == 1 and "not a safetensors file" in err and "NumPy" in err,
          "safetensors: a .npy file is refused as foreign", err)
    check(not os.path.exists(path("u.safetensors")), "safetensors: nothing written on errors")
    no_temporary_files("safetensors")


# ---- tokens -----------------------------------------------------------------------------------
def llmc_bytes(tokens, magic=20240520, version=1, dtype=np.uint16, count=None):
    """A token file as llm.c's dev/data/data_common.py write_datafile makes it."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    return header.tobytes() + np.asarray(tokens, dtype=dtype).tobytes()


def test_tokens():
    n = int(rng.integers(1, 20000))
    tokens = rng.integers(0, 65536, size=n).astype(np.uint32)
    expected = llmc_bytes(tokens)
    sources = [
        ("auto", "llm.c", expected),
        ("llmc", "llm.c", expected),
        ("uint16", "raw uint16", tokens.astype(np.uint16).tobytes()),
        ("uint32", "raw uint32", tokens.astype(np.uint32).tobytes()),
        ("auto", "llm.c Llama 3", llmc_bytes(tokens, 20240801, 7, np.uint32)),
    ]
    for format_, what, data in sources:
        with open(path("in.bin"), "wb") as f:
            f.write(data)
        code, _, err = run(f"tokens {what}", tool, "tokens", format_, path("in.bin"),
                           path("out.bin"))
        check(code == 0 and read_bytes(path("out.bin")) == expected,
              f"tokens {what} ({format_}): copied into llm.c's format", err)
    refusals = [
        ("auto", "raw uint16 without --data-format", tokens.astype(np.uint16).tobytes(),
         "--data-format uint16|uint32"),
        ("auto", "torn llm.c", expected[:-2], "torn"),
        ("auto", "llm.c longer than its count", expected + b"\0\0", "header says"),
        ("auto", "llm.c version 2", llmc_bytes(tokens, version=2), "version 2"),
        ("uint32", "a token beyond 16 bits", np.array([1, 65536], np.uint32).tobytes(),
         "65536 at position 1"),
    ]
    for format_, what, data, words in refusals:
        with open(path("in.bin"), "wb") as f:
            f.write(data)
        code, _, err = run(f"tokens {what}", tool, "tokens", format_, path("in.bin"),
                           path("refused.bin"))
        check(code == 1 and words in err and not os.path.exists(path("refused.bin")),
              f"tokens {what}: refused", err)
    no_temporary_files("tokens")


def megatron_split(n, weights):
    """megatron/core/datasets/utils.py's split indices (with 0 for a missing test weight)."""
    weights = np.array(weights, dtype=np.float64)
    weights = (weights / np.sum(weights)).tolist()
    indices = [0]
    for w in weights:
        indices.append(indices[-1] + int(round(w * float(n))))
    indices[1:] = [i - (indices[-1] - n) for i in indices[1:]]
    return indices


def test_split():
    cases = [(1000, [969, 30, 1]), (10, [9, 1]), (5, [0.1, 0.45, 0.45]), (7, [1, 1, 1])]
    for _ in range(40):
        k = int(rng.integers(2, 4))
        cases.append((int(rng.integers(0, 10**7)), [float(w) for w in rng.integers(1, 1000, k)]))
    for n, weights in cases:
        code, out, err = run(f"split {n} {weights}", tool, "split", str(n),
                             *[repr(w) for w in weights])
        ends = megatron_split(n, weights)
        want = "".join(f"{max(0, ends[i])} {ends[i + 1]}\n" for i in range(len(weights)))
        check(code == 0 and out == want, f"split {n} {weights}: as Megatron", out + err)


# ---- f8c tokenize -----------------------------------------------------------------------------
def test_tokenize():
    text = rng.bytes(int(rng.integers(1, 50000))) + bytes(range(256))
    with open(path("text.txt"), "wb") as f:
        f.write(text)
    code, out, err = run("tokenize", f8c, "tokenize", path("text.txt"), "-o", path("t.bin"))
    if check(code == 0, "tokenize: runs", err):
        check(out.count("\n") == 1 and str(len(text)) in out and path("t.bin") in out,
              "tokenize: a one-line summary with the count and the path", out)
        header = np.fromfile(path("t.bin"), dtype="<i4", count=256)
        got = np.fromfile(path("t.bin"), dtype="<u2", offset=1024)
        check(list(header[:3]) == [20240520, 1, len(text)] and not header[3:].any(),
              "tokenize: llm.c's header", str(header[:4]))
        check(np.array_equal(got, np.frombuffer(text, dtype=np.uint8)),
              "tokenize: one token per byte")
    with open(path("empty.txt"), "wb"):
        pass
    os.makedirs(path("folder"), exist_ok=True)
    errors = [
        (1, "a missing file", [path("missing.txt"), "-o", path("x.bin")], "missing.txt"),
        (1, "an empty file", [path("empty.txt"), "-o", path("x.bin")], "empty"),
        (1, "a folder", [path("folder"), "-o", path("x.bin")], "regular file"),
        (1, "an output folder that does not exist",
         [path("text.txt"), "-o", path("nowhere/x.bin")], "nowhere"),
        (2, "no arguments", [], "usage"),
        (2, "no -o", [path("text.txt")], "-o"),
        (2, "-o without a file", [path("text.txt"), "-o"], "-o"),
        (2, "an unknown option", [path("text.txt"), "-o", path("x.bin"), "--vocab"], "--vocab"),
        (2, "two texts", [path("text.txt"), path("text.txt"), "-o", path("x.bin")], "one"),
        (2, "-o the text itself", [path("text.txt"), "-o", path("text.txt")], "overwrite"),
    ]
    for want, what, args, words in errors:
        code, _, err = run(f"tokenize {what}", f8c, "tokenize", *args)
        check(code == want and words in err and "HINT" in err and
              not os.path.exists(path("x.bin")), f"tokenize {what}: exits {want}", err)
    check(read_bytes(path("text.txt")) == text, "tokenize: the text is left as it was")
    no_temporary_files("tokenize")


test_npy()
test_safetensors()
test_tokens()
test_split()
test_tokenize()
sys.exit(finish())
