#!/usr/bin/env python3
"""Where the worker's time went, per verdict of an archive: one line per verdict measured
today (UTC) with the worker's total and its largest parts (run.timings), then the mean per task.
usage: scripts/verdict_times.py [archive/verdicts.jsonl] [--all]"""
import collections
import datetime
import json
import sys

path = next((a for a in sys.argv[1:] if not a.startswith("--")), "archive/verdicts.jsonl")
today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
keys = ["correct", "determinism", "stream", "profile", "upload", "readback", "integrity", "compare",
        "wait_inputs", "wait_reference", "device_inputs"]
per_task = collections.defaultdict(list)
for line in open(path):
    d = json.loads(line)
    if d.get("kind") != "verdict":
        continue
    v = d["doc"]
    if "--all" not in sys.argv and not str(v.get("date", "")).startswith(today):
        continue
    run = v.get("run") or {}
    t = run.get("timings")
    if not t:
        continue
    task = v.get("task", {}).get("name") if isinstance(v.get("task"), dict) else None
    task = task or v["candidate"]["name"].split("/")[0]
    worker = (run.get("parent") or {}).get("worker", t.get("total", 0))
    per_task[task].append(worker)
    parts = " ".join(f"{k}={t.get(k, 0):.2f}" for k in keys)
    print(f"{task:<10} {v['candidate']['name'][-24:]:<24} worker={worker:.2f}s {parts}")
for task, xs in sorted(per_task.items()):
    print(f"mean {task:<10} {sum(xs) / len(xs):.2f} s over {len(xs)} verdicts")
