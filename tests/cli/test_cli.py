"""The f8c command as a user meets it: help and version, dump-ir on the example model in both
formats, the documented FP8 facts of `f8c fp8 table`, and malformed input of every kind giving
an error that names file:line:col with the line and a caret, a non-zero exit, and no crash.

usage: test_cli.py F8C_BINARY SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c, source = sys.argv[1], sys.argv[2]




def run(*args, stdin=b""):
    result = subprocess.run([f8c, *args], input=stdin, capture_output=True, timeout=60)
    # A crash shows as a negative return code (a signal) or a sanitizer report (UBSan's says
    # "runtime error:", and exits 1 where it does not abort).
    crashed = (result.returncode < 0 or b"Sanitizer" in result.stderr
               or b"runtime error:" in result.stderr)
    check(not crashed, f"f8c {' '.join(args)} does not crash", result.stderr.decode(errors="replace"))
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


code, out, _ = run("help")
check(code == 0 and "dump-ir" in out and "fp8" in out, "help lists the commands", out)
code, out, _ = run("version")
check(code == 0 and re.match(r"f8c \d+\.\d+\.\d+", out), "version prints a version", out)
code, _, err = run("no-such-command")
check(code == 2 and "HINT" in err, "an unknown command is a usage error with a hint", err)

model = os.path.join(source, "models", "gpt2-block.f8ir")
code, out, err = run("dump-ir", model, "--after", "canonicalize", "--verify")
check(code == 0 and "f32[batch, seq, 3072] = Linear" in out, "dump-ir infers the example's types", out + err)
code, out, err = run("dump-ir", model, "--after", "canonicalize", "--format", "json")
try:
    document = json.loads(out)
    nodes = document["nodes"]
    check(document["format"] == "f8c-graph" and len(nodes) == 19, "the JSON form has every node", out[:400])
    check(nodes[1]["outputs"][0]["shape"] == ["batch", "seq", 2304], "JSON dims: symbols as text", str(nodes[1]))
except (json.JSONDecodeError, KeyError, IndexError) as error:
    check(False, "dump-ir --format json prints the graph as JSON", f"{error}\n{out[:400]}{err}")
code, _, err = run("dump-ir", model, "--after", "no-such-pass")
check(code == 2 and "HINT" in err and "canonicalize" in err, "an unknown pass names the passes", err)
code, _, err = run("dump-ir", os.path.join(source, "no", "such", "file.f8ir"))
check(code == 1 and "cannot open" in err, "a missing file is an error naming it", err)
code, _, err = run("dump-ir")
check(code == 2, "dump-ir without a file is a usage error", err)

# Malformed models: each must give FILE:LINE:COL, the line, a caret, and exit 1.
malformed = {
    "unknown_op.f8ir": ("graph g {\n  input %x : f32[4]\n  %y = Frobnicate(%x)\n}\n", 3, 8),
    "bad_char.f8ir": ("graph g {\n  input %x : f32[4] $\n}\n", 2, 21),
    "truncated.f8ir": ("graph g {\n  input %x : f32[4\n", 2, 19),
    "bad_number.f8ir": ("graph g {\n  input %x : f32[12ab]\n}\n", 2, 18),
    "binary.f8ir": ("graph g {\n  \x01\x02\x03\n}\n", 2, 3),
    "empty.f8ir": ("", 1, 1),
    "huge_int.f8ir": ("graph g {\n  input %x : f32[99999999999999999999]\n}\n", 2, 18),
    "dim_overflow.f8ir": ("graph g {\n  input %x : f32[9223372036854775807*4]\n}\n", 2, 18),
}
with tempfile.TemporaryDirectory() as folder:
    for name, (text, line, column) in malformed.items():
        path = os.path.join(folder, name)
        with open(path, "w", encoding="latin-1") as file:
            file.write(text)
        code, out, err = run("dump-ir", path)
        head = f"{path}:{line}:{column}: error:"
        check(code == 1 and err.startswith(head), f"{name}: error at {line}:{column}", err)
        check(out == "", f"{name}: nothing printed on stdout", out)
        if text.strip():
            check("^" in err, f"{name}: a caret under the place", err)

# Graphs with no nodes (an ONNX file, a text graph): every pass, an inference plan and its run
# take them (the sanitizer builds abort on undefined behaviour, such as a NULL node order handed
# to memcpy); training refuses them, saying why.
def empty_onnx(path, with_input):
    import onnx
    from onnx import TensorProto, helper
    values = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])] if with_input else []
    graph = helper.make_graph([], "empty", values, values)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


with tempfile.TemporaryDirectory() as folder:
    empties = {"passthrough.onnx": True, "nothing.onnx": False, "nothing.f8ir": False}
    x = os.path.join(folder, "x.npy")
    with open(x, "wb") as file:  # .npy v1.0 of two f32 values, written by hand: no numpy here
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
        header += " " * (63 - len(header)) + "\n"
        file.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        file.write(b"\x00\x00\x80\x3f\x00\x00\x00\x40")  # 1.0, 2.0
    for name, with_input in empties.items():
        path = os.path.join(folder, name)
        if name.endswith(".onnx"):
            empty_onnx(path, with_input)
        else:
            with open(path, "w") as file:
                file.write("graph empty {\n}\n")
        for after in ("canonicalize", "fuse-patterns"):
            code, out, err = run("dump-ir", path, "--after", after)
            check(code == 0 and out.startswith("graph "), f"{name}: dump-ir --after {after} prints the empty graph", err)
        plan = os.path.join(folder, name + ".plan")
        code, out, err = run("compile", path, "--inference", "-o", plan)
        check(code == 0 and "0 nodes" in out + err, f"{name}: compile --inference makes a plan of no nodes", out + err)
        inputs = ["--input", f"x={x}"] if with_input else []
        code, out, err = run("infer", plan, *inputs, "--output-dir", os.path.join(folder, name + ".out"))
        check(code == 0, f"{name}: infer runs the empty plan", err)
        if with_input:
            with open(os.path.join(folder, name + ".out", "x.npy"), "rb") as file:
                check(file.read().endswith(b"\x00\x00\x80\x3f\x00\x00\x00\x40"),
                      f"{name}: infer passes the input through", "")
        code, out, err = run("compile", path, "--micro-batch-size", "1", "--seq-length", "4", "-o", plan + "-train")
        check(code == 1 and "error:" in err and ("no output" in err or "nothing to train" in err)
              and not os.path.exists(os.path.join(plan + "-train", "plan.json")),
              f"{name}: a training compile is refused, saying why", err)


# The FP8 facts the issue names, from the table a user prints.
def table_row(fmt, code_hex):
    code, out, err = run("fp8", "table", fmt)
    check(code == 0, f"fp8 table {fmt} succeeds", err)
    rows = [line for line in out.splitlines() if line.split() and line.split()[0].lower() == code_hex]
    check(len(rows) == 1, f"fp8 table {fmt} has one row for {code_hex}", out[:300])
    return rows[0] if rows else ""


check(table_row("e4m3", "0x7e").split()[-1] == "448", "e4m3 0x7e = 448")
check(table_row("e4m3", "0x7f").split()[-1].lower() == "nan", "e4m3 0x7f = nan")
check(table_row("e5m2", "0x7b").split()[-1] == "57344", "e5m2 0x7b = 57344")
check(table_row("e5m2", "0x7c").split()[-1].lower() == "inf", "e5m2 0x7c = inf")
code, _, err = run("fp8", "table", "e3m4")
check(code == 2 and "HINT" in err, "an unknown FP8 format is a usage error with a hint", err)
code, out, err = run("fp8", "quantize", "e4m3", stdin=b"\x00\x00\xe0\x43")  # 448.0
check(code == 0 and out.encode("latin-1") == b"\x7e", "quantize e4m3 448 -> 0x7e", repr(out) + err)
code, _, err = run("fp8", "quantize", "e4m3", stdin=b"\x00\x00\xe0")  # 3 bytes
check(code == 1 and "HINT" in err, "quantize refuses input that is not whole float32 values", err)

sys.exit(finish())
