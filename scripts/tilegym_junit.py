"""Summarise a JUnit file of TileGym's own test files run against our backend.

    python scripts/tilegym_junit.py JUNIT_XML

Prints how many cutile-rs cases passed, failed and skipped, with each skip's
reason, and exits 1 when none ran, any failed, or any skipped for a reason
other than the ones TileGym's files hard-code for the cutile-rs backend by
name (they skip its transposes, its backward pass and fp8 whatever the
implementation does; our own tests cover the first two), or for every backend.
"""

from __future__ import annotations

import collections
import re
import sys
import xml.etree.ElementTree as ET

# Skips TileGym's test files make before calling the op: for backend == "cutile-rs" by name,
# and by shape for every backend (test_matmul's k == 1023, test_attention_sink's S_q > S_kv).
_BY_NAME = re.compile(
    r"cutile-rs matmul does not support transpose"
    r"|cutile-rs bmm non-persistent variant does not support transpose"
    r"|cutile-rs backend does not support the backward pass"
    r"|cutile-rs matmul does not support dtype torch\.float8"
    r"|Skip matmul due to result mismatch when cannot divide BLOCK"
    r"|Number of queries cannot exceed number of keys"
)
# Test ids: TileGym's conftest turns the parameter "cutile-rs" into cutile_rs.
_OURS = re.compile(r"cutile[-_]rs")


def main(path: str) -> int:
    outcomes: collections.Counter[str] = collections.Counter()
    skip_reasons: collections.Counter[tuple[str, str]] = collections.Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if not _OURS.search(name):
            continue
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped")
        if failed:
            outcomes["failed"] += 1
        elif skipped is not None:
            reason = skipped.get("message", "")
            kind = "by name" if _BY_NAME.search(reason) else "NOT ALLOWED"
            outcomes[f"skipped ({kind})"] += 1
            skip_reasons[(kind, reason)] += 1
        else:
            outcomes["passed"] += 1
    print("TileGym cutile-rs cases: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())))
    for (kind, reason), n in sorted(skip_reasons.items()):
        print(f"  {n:4d} skipped, {kind}: {reason}")
    bad = outcomes["failed"] + outcomes["skipped (NOT ALLOWED)"]
    if bad or not outcomes["passed"]:
        print("error: every cutile-rs case must run and pass", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
