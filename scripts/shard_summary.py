"""Add up the closing lines of sharded pytest runs into one line.

Each shard ends with pytest's own summary ("=== 412 passed, 9 skipped in 811.2s ===");
this prints "tests: N passed, N failed, N skipped" for them all, and exits 1 when a
shard has no summary (it crashed or was killed) so a lost shard never reads as a pass.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
SUMMARY = re.compile(r"^=+ .*\b(passed|failed|skipped|error|errors|no tests ran)\b.* in [\d.]+s")


def main(paths: list[str]) -> int:
    totals: dict[str, int] = {}
    missing = []
    for path in paths:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if SUMMARY.match(ln)]
        if not lines:
            missing.append(path)
            continue
        for number, word in COUNT.findall(lines[-1]):
            key = "errors" if word.startswith("error") else word
            totals[key] = totals.get(key, 0) + int(number)
    for path in missing:
        print(f"tests: {path} has no pytest summary: that shard did not finish", file=sys.stderr)
    failed = totals.get("failed", 0) + totals.get("errors", 0)
    extra = f", {totals['skipped']} skipped" if totals.get("skipped") else ""
    print(f"tests: {totals.get('passed', 0)} passed, {failed} failed{extra}")
    return 1 if missing or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
