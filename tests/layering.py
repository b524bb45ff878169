#!/usr/bin/env python3
"""Holds the dependency layering of DESIGN.md ("Compile and run are two programs' worth of code").

Usage: layering.py SOURCE_DIR

Dependencies only point down: ir <- frontend, passes <- codegen <- the compile driver (tools/);
ir <- runtime core <- backends <- tools/. This scans the quoted #include lines of every .c and .h
file under the directories a rule names and fails (exit 1) listing each include that breaks an
enforced rule, as `passes/fuse.c:17: #include "codegen/lower.h"`. A rule not yet enforced is
checked too and its includes are printed, but they do not fail the test: it is switched on by
setting `enforced` once the code holds it. A rule whose directories hold no file fails, so that
a moved directory cannot leave a rule checking nothing.

To add a rule, append to RULES: the files it covers (directory prefixes relative to SOURCE_DIR,
with `exclude` for the ones inside them it does not cover), and either the include prefixes it
forbids (`forbid`) or the only ones it allows (`allow`).
"""

import os
import re
import sys

RULES = [
    {
        "name": "ir/ includes only ir/",
        "why": "the IR is the bottom layer: everything depends on it, it depends on nothing",
        "files": ["ir/"],
        "allow": ["ir/"],
        "enforced": True,
    },
    {
        "name": "passes/ never includes codegen/",
        "why": "what a pass may fuse comes from the target table in the pipeline options "
        "(passes/target.h), which codegen fills",
        "files": ["passes/"],
        "forbid": ["codegen/", "runtime/", "tools/"],
        "enforced": True,
    },
    {
        "name": "codegen/ never includes frontend/ or runtime/",
        "why": "codegen lowers the IR the passes made; the runtime loads what it made",
        "files": ["codegen/"],
        "forbid": ["frontend/", "runtime/", "tools/"],
        "enforced": True,
    },
    {
        # The CPU backend's generated kernels (runtime/cpu/generated.c) are the one place where
        # the runtime may call codegen: the oracle may depend on the compiler. What the
        # runtime knows of a compiled step is in the plan's record (runtime/plan.h); the
        # compile options are the compile driver's (tools/compile.h).
        "name": "the runtime and runtime/cuda/ never include frontend/, passes/ or codegen/",
        "why": "they run on every rank of a cluster, which has no compiler toolchain (the "
        "build without LLVM, -DF8C_LLVM=OFF, links neither LLVM nor protobuf-c)",
        "files": ["runtime/"],
        "exclude": ["runtime/cpu/generated.c", "runtime/cpu/generated.h"],
        "forbid": ["frontend/", "passes/", "codegen/", "tools/"],
        "enforced": True,
    },
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(root, rule):
    """The .c and .h files a rule covers, as paths relative to root, sorted."""
    found = []
    for top in rule["files"]:
        for directory, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if name.endswith((".c", ".h")):
                    path = os.path.relpath(os.path.join(directory, name), root)
                    if not any(path.startswith(skip) for skip in rule.get("exclude", [])):
                        found.append(path)
    return sorted(found)


def breaks(rule, included):
    """Whether including `included` breaks `rule`."""
    if "allow" in rule:
        return not any(included.startswith(prefix) for prefix in rule["allow"])
    return any(included.startswith(prefix) for prefix in rule["forbid"])


def check(root, rule):
    """The includes that break `rule`, as printable lines; None when it covers no file."""
    files = sources(root, rule)
    if not files:
        return None
    found = []
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
            for number, line in enumerate(source, 1):
                match = INCLUDE.match(line)
                if match and breaks(rule, match.group(1)):
                    found.append(f'{path}:{number}: #include "{match.group(1)}"')
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = sys.argv[1]
    failed = False
    for rule in RULES:
        found = check(root, rule)
        state = "enforced" if rule["enforced"] else "not yet enforced"
        if found is None:
            print(f"FAIL {rule['name']}: no file under {', '.join(rule['files'])}")
            print("HINT: a directory moved; update RULES in tests/layering.py")
            failed = True
            continue
        if not found:
            print(f"ok   {rule['name']} ({state})")
            continue
        print(f"{'FAIL' if rule['enforced'] else 'todo'} {rule['name']} ({state}): "
              f"{len(found)} include(s); {rule['why']}")
        for line in found:
            print(f"  {line}")
        if rule["enforced"]:
            print("HINT: DESIGN.md, \"Compile and run are two programs' worth of code\": "
                  "pass what the lower layer needs through its interface instead")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
