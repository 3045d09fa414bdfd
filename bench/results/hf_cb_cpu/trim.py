"""Trim a `measure --json` list in place: each result's per-step anatomy rows (`steps_decode`,
~150 KB a run) become their count; every other key is kept. Usage: python trim.py FILE.json"""

import json
import sys

path = sys.argv[1]
with open(path) as f:
    results = json.load(f)
for r in results:
    r["steps_decode"] = {"trimmed": True, "count": len(r.get("steps_decode") or [])}
with open(path, "w") as f:
    json.dump(results, f, indent=1)
    f.write("\n")
