#!/usr/bin/env python3
"""Take out of archive/verdicts.jsonl what no current work reads any more: the lineages of experts
that changed (a lineage's key covers its expert's text, so a new expert starts a new lineage and the
old one stays) and the verdicts only those lineages referred to. The skill cards (kinds `skill`,
`skill-part`) stay: a fresh store that imports the archive has the library at once (the README's
`klineage optimize` on a machine without a GPU needs it), and replaying the walks merges into it.

    python3 scripts/archive_prune.py [--archive FILE] [--tasks DIR] [--dry-run]

Verdicts are kept when any kept lineage, or anything outside the lineages (the suite, rules
sequences, experiments, tests), may refer to them: only a verdict whose key appears in a dropped
lineage and in no kept lineage goes. Prints what it drops."""
import json
import os
import re
import sys

HEX = re.compile(r'"([0-9a-f]{64})"')


def main():
    args = sys.argv[1:]
    archive = "archive/verdicts.jsonl"
    dry = "--dry-run" in args
    if "--archive" in args:
        archive = args[args.index("--archive") + 1]
    tasks_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tasks")
    if "--tasks" in args:
        tasks_dir = args[args.index("--tasks") + 1]
    lines = []
    with open(archive) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
                o["kind"], o["key"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                sys.exit(f"{archive}:{n}: expected a line {{\"kind\": …, \"key\": …, \"doc\": …}} ({e})")
            lines.append((o["kind"], o["key"], o, line if line.endswith("\n") else line + "\n"))
    experts = {}
    for t in os.listdir(tasks_dir):
        p = os.path.join(tasks_dir, t, "expert.cu")
        if os.path.isfile(p):
            experts[t] = open(p).read()
    keep_l, drop_l = [], []
    for kind, key, o, line in lines:
        if kind != "lineage":
            continue
        d = o["doc"]
        versions = d.get("versions") or []
        text = versions[0].get("source") if versions and isinstance(versions[0], dict) else None
        current = text is not None and experts.get(d.get("task")) == text
        (keep_l if current else drop_l).append((key, line))
    kept_refs = set()
    for _, line in keep_l:
        kept_refs.update(HEX.findall(line))
    dropped_refs = set()
    for _, line in drop_l:
        dropped_refs.update(HEX.findall(line))
    drop_v = dropped_refs - kept_refs
    out, dropped = [], {"lineage": 0, "verdict": 0}
    drop_lkeys = {k for k, _ in drop_l}
    for kind, key, o, line in lines:
        if (kind == "lineage" and key in drop_lkeys) or (kind == "verdict" and key in drop_v):
            dropped[kind] += 1
            continue
        out.append(line)
    print(f"{archive}: dropping {dropped['lineage']} lineage(s) of experts that changed "
          f"({', '.join(json.loads(l)['doc'].get('task', '?') for _, l in drop_l) or 'none'}), "
          f"{dropped['verdict']} verdict(s) only they referred to; keeping {len(out)} line(s) "
          f"(the skill cards among them)")
    if not dry:
        tmp = archive + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(out)
        os.replace(tmp, archive)


if __name__ == "__main__":
    main()
