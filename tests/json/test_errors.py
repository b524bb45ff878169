"""Malformed model descriptions as a user meets them through `f8c dump-ir`: each error names
FILE:LINE:COL of the field at fault (of the object, for a missing one), names the field, shows
the line with a caret, gives a hint where one helps, exits 1, and prints nothing on stdout.

usage: test_errors.py F8C_BINARY
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

f8c = sys.argv[1]




# A valid description to break, one field a line: `"vocab": 256` is on line 3, its value at
# column 12.
GOOD = """{
  "arch": "gpt",
  "vocab": 256,
  "seq": 128,
  "layers": 2,
  "hidden": 128,
  "heads": 4
}
"""


def replace(old, new):
    assert old in GOOD
    return GOOD.replace(old, new)


def more(fields, arch="gpt"):
    """GOOD with `fields` added on the heads line (line 7, from column 15) and another arch."""
    return replace('"heads": 4', '"heads": 4, ' + fields).replace('"gpt"', f'"{arch}"')


NO_HIDDEN = GOOD.replace('  "hidden": 128,\n', '')
ODD_HEAD_DIM = NO_HIDDEN.replace('"heads": 4', '"heads": 4, "pos": "rope", "hidden": 132')

# (name, text, line, column, words the message must hold, whether a HINT must follow)
CASES = [
    ("wrong_type", replace('"vocab": 256', '"vocab": "256"'), 3, 12,
     ['"vocab"', "integer", "string"], True),
    ("wrong_type_bool", replace('"hidden": 128', '"hidden": true'), 6, 13, ['"hidden"'], True),
    ("real_for_integer", replace('"layers": 2', '"layers": 2.5'), 5, 13,
     ['"layers"', "real"], True),
    ("unknown_key", more('"dropout": 0.1'), 7, 15, ['unknown field "dropout"'], True),
    ("misspelled_key", replace('"hidden"', '"hiden"'), 6, 3, ['"hiden"'], True),
    ("hugging_face_key", replace('"layers"', '"n_layer"'), 5, 3, ['"n_layer"'], True),
    ("missing_field", replace('"heads": 4', '"ffn": 512'), 1, 1, ['missing field "heads"'], True),
    ("missing_arch", replace('"arch": "gpt",', '"name": "x",'), 1, 1,
     ['missing field "arch"'], True),
    ("unknown_arch", replace('"gpt"', '"bert"'), 2, 11, ['"arch"', '"bert"'], True),
    ("duplicate_key", replace('"seq": 128,', '"seq": 128, "seq": 256,'), 4, 15,
     ['"seq"', "twice"], True),
    ("heads_not_dividing_hidden", replace('"heads": 4', '"heads": 6'), 7, 12,
     ['"heads"', '"hidden"', "divide"], True),
    ("kv_heads_not_dividing_heads", more('"kv_heads": 3'), 7, 27, ['"kv_heads"'], True),
    ("odd_head_dim_with_rope", ODD_HEAD_DIM, 6, 12, ['"heads"', "odd", "rope"], True),
    ("truncated", GOOD[:GOOD.index('"layers"') + 9], 5, 12, ["end of file"], True),
    ("not_json", "this is not JSON\n", 1, 1, ["malformed JSON"], True),
    ("binary", "{\x01\x02\x00\x7f\n", 1, 4, ["NUL"], True),
    ("empty", "", 1, 1, ["empty"], True),
    ("array", "[1, 2, 3]\n", 1, 1, ["JSON object", "array"], True),
    ("zero_size", replace('"layers": 2', '"layers": 0'), 5, 13, ['"layers"', "positive"], True),
    ("negative_size", replace('"seq": 128', '"seq": -128'), 4, 10, ['"seq"', "-128"], True),
    ("huge_size", replace('"hidden": 128', '"hidden": 1000000000'), 6, 13,
     ['"hidden"', "at most"], False),
    ("too_big_integer", replace('"vocab": 256', '"vocab": 123456789012345678901234567890'), 3, 12,
     ['"vocab"'], False),
    ("bad_literal", more('"bias": ture'), 7, 23, ['"bias"', "invalid token"], False),
    ("top_k_over_experts", more('"experts": 4, "top_k": 5', "moe"), 7, 38,
     ['"top_k"', '"experts"'], True),
    ("experts_for_gpt", more('"experts": 8'), 7, 15, ['"experts"', '"moe"'], True),
    ("rope_theta_for_learned", more('"rope_theta": 10000'), 7, 15, ['"rope_theta"'], True),
    ("bad_choice", more('"act": "relu"'), 7, 22, ['"act"', '"relu"'], True),
    ("bad_epsilon", more('"norm_eps": -1e-5'), 7, 27, ['"norm_eps"'], True),
    ("bias_for_moe", more('"experts": 4, "bias": true', "moe"), 7, 37, ['"bias"', "moe"], True),
]


def run(path):
    result = subprocess.run([f8c, "dump-ir", path], capture_output=True, timeout=60)
    crashed = result.returncode < 0 or b"Sanitizer" in result.stderr
    check(not crashed, f"f8c dump-ir {path} does not crash",
          result.stderr.decode(errors="replace"))
    return (result.returncode, result.stdout.decode(errors="replace"),
            result.stderr.decode(errors="replace"))


with tempfile.TemporaryDirectory() as folder:
    good = os.path.join(folder, "good.json")
    with open(good, "w") as file:
        file.write(GOOD)
    code, out, err = run(good)
    check(code == 0 and "%logits" in out, "the description the cases break is good", err)
    check(len({name for name, *_ in CASES}) == len(CASES), "the cases have distinct names")

    for name, text, line, column, words, hint in CASES:
        path = os.path.join(folder, f"{name}.json")
        with open(path, "w", encoding="latin-1") as file:
            file.write(text)
        code, out, err = run(path)
        head = f"{path}:{line}:{column}: error: "
        check(code == 1 and err.startswith(head), f"{name}: error at {line}:{column}", err)
        first = err.splitlines()[0] if err else ""
        check(all(word in first for word in words), f"{name}: the message names {words}", err)
        check(out == "", f"{name}: nothing on stdout", out[:200])
        if text.strip():
            check("^" in err, f"{name}: a caret under the place", err)
        if hint:
            check("\nHINT: " in err, f"{name}: a hint", err)

    # Files that are too big, or not there.
    big = os.path.join(folder, "big.json")
    with open(big, "w") as file:
        file.write("{" + " " * (1 << 20) + "}")
    code, out, err = run(big)
    check(code == 1 and err.startswith(f"{big}: error:") and "bytes" in err,
          "a huge file is refused", err)
    code, out, err = run(os.path.join(folder, "absent.json"))
    check(code == 1 and "cannot open" in err, "a missing file is an error naming it", err)

sys.exit(finish())
