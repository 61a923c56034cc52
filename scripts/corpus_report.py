"""Counts of the foreign corpus per framework (issue 43), read from the committed snapshots (<file>.issues.json):
validates as shipped / accepted with overrides (every error names an override and the file then validates) /
refused (an error names what is not built). `-v` lists every file that does not validate as shipped, with its
first error. The snapshots are what tests/trainer/importers/test_foreign_corpus.py checks, so the counts are this
tree's: `python scripts/corpus_report.py [-v]`.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.trainer.importers.test_foreign_corpus import CORPUS, FILES, sources  # noqa: E402


def group(name: str, commit: str) -> str:
    """The framework, with the commit for the trees saved whole (ROLL's examples, verl-recipe, RLinf current)."""
    fmt = name.split("/")[0]
    if fmt == "roll":
        return f"roll @{commit[:7]}"
    if name.startswith(("verl/recipe@", "rlinf/current@")):
        return f"{fmt}/{name.split('/')[1].split('@')[0]} @{commit[:7]}"
    return fmt


def main(verbose: bool) -> None:
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    listed = []
    meta = sources()
    for name in FILES:
        snap = json.loads((CORPUS / f"{name}.issues.json").read_text(encoding="utf-8"))
        key = group(name, meta[name]["commit"])
        if not snap["refused_for"]:
            rows[key][0] += 1
            continue
        kind = 1 if snap["overrides_that_validate"] is not None else 2
        rows[key][kind] += 1
        listed.append((("with overrides", "refused")[kind - 1], name, snap["refused_for"][0]))
    print("| files | as shipped | with overrides | refused |")
    print("| --- | --- | --- | --- |")
    for key, (ok, fixed, refused) in sorted(rows.items()):
        total = ok + fixed + refused
        print(f"| {key} ({total}) | {ok} ({100 * ok // total} %) | {fixed} | {refused} |")
    if verbose:
        for kind, name, first in listed:
            print(f"{kind}: {name}\n    {first}")


if __name__ == "__main__":
    main("-v" in sys.argv[1:])
