"""A JSON document on stdin, printed with sorted keys and without what says when it was made
(started, updated, elapsed_s, date, output), at any depth: for comparing runs."""
import json
import sys

DROP = {"started", "updated", "elapsed_s", "date", "output"}


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in DROP}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


print(json.dumps(strip(json.load(sys.stdin)), sort_keys=True))
