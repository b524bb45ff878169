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
    # A crash shows as a negative return code (a signal) or a sanitizer report.
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
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
