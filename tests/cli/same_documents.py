#!/usr/bin/env python3
"""Are two klineage documents (a lineage, an optimization run) the same, apart from when and
how long? Used by the executors' tests: a run on a pool or a Slurm cluster must equal the run
judged in process. Prints the first difference and exits 1 when they differ."""
import json
import sys

TIMES = {"date", "updated", "started", "created", "elapsed_s", "seconds", "wall_s"}


def norm(d):
    if isinstance(d, dict):
        return {k: norm(v) for k, v in d.items() if k not in TIMES}
    if isinstance(d, list):
        return [norm(x) for x in d]
    return d


def first_diff(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'the second' if k in b else 'the first'}"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


a, b = (norm(json.load(open(p))) for p in sys.argv[1:3])
d = first_diff(a, b)
if d:
    print("different:", d)
    sys.exit(1)
