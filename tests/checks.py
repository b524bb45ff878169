"""The pass/fail tally the Python tests share.

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from checks import check, finish
    ...
    sys.exit(finish())
"""

passed = failed = 0


def check(condition, what, detail=""):
    """Counts one check; prints what failed and why (at most 3000 characters of detail)."""
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}\n{detail}"[:3000])
    return bool(condition)


def finish():
    """Prints the tally; the exit status: 1 when anything failed."""
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
