#!/usr/bin/env python3
"""The "Measured" table of issue 16: every suite naive kernel matched against the skill library
without its own task's lineages (leave-one-out), with `klineage skills match --exclude-task T`.

    python3 scripts/skills_match_table.py [--klineage build/klineage] [--db FILE] [--tasks DIR] [--details]

Prints a Markdown table: per task, the cards that hold, fail and are unknown (a card is judged at
its best site), the conditions evaluated at those sites (holds / fails / unknown, and the share
unknown), then every unknown condition and why. --details adds every failing card's first
reason. The store (--db, default klineage.db) must hold the library: replay the eight walks into
it first (`klineage --measure replay lineage tasks/T`)."""
import json
import os
import subprocess
import sys


def main():
    args = sys.argv[1:]
    kl = "build/klineage"
    db = "klineage.db"
    tasks_dir = "tasks"
    details = "--details" in args
    for flag in ("--klineage", "--db", "--tasks"):
        if flag in args:
            v = args[args.index(flag) + 1]
            if flag == "--klineage":
                kl = v
            elif flag == "--db":
                db = v
            else:
                tasks_dir = v
    tasks = sorted(t for t in os.listdir(tasks_dir) if os.path.exists(os.path.join(tasks_dir, t, "task.json")))
    rows, unknowns, fails = [], [], []
    tot = {"cards": 0, "holds": 0, "fails": 0, "unknown": 0, "c_holds": 0, "c_fails": 0, "c_unknown": 0}
    for t in tasks:
        tdir = os.path.join(tasks_dir, t)
        naive = json.load(open(os.path.join(tdir, "task.json"))).get("naive")
        if not naive:
            continue
        p = subprocess.run([kl, "--db", db, "--json", "skills", "match", os.path.join(tdir, naive), "--task", tdir,
                            "--exclude-task", t], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{t}: klineage skills match: exit {p.returncode}: {p.stderr.strip()}")
        d = json.loads(p.stdout)
        cards = d["skills"]
        c = {"holds": 0, "fails": 0, "unknown": 0}
        ch = {"holds": 0, "fails": 0, "unknown": 0}
        nosite = 0
        for s in cards:
            c[s["result"]] += 1
            nosite += bool(s.get("no_site"))
            for k in s["checks"]:
                ch[k["result"]] += 1
                if k["result"] == "unknown":
                    unknowns.append((t, s["id"], k["predicate"], k["why"]))
            if details and s["result"] == "fails":
                first = next((k for k in s["checks"] if k["result"] == "fails"), None)
                why = ("no site where the rules apply " + s["transform"]) if s.get("no_site") else \
                    (f"{first['predicate']} at {first['shape'] or 'the site'} ({first['why']})" if first else
                     "needs " + ", ".join(s["missing_requires"]))
                fails.append((t, s["id"], s["where"], why))
        n = sum(ch.values())
        rows.append((t, len(cards), c["holds"], c["fails"], nosite, c["unknown"], ch["holds"], ch["fails"],
                     ch["unknown"], 100.0 * ch["unknown"] / n if n else 0.0))
        tot["cards"] += len(cards)
        for k in ("holds", "fails", "unknown"):
            tot[k] += c[k]
            tot["c_" + k] += ch[k]
    print("| task | cards (without its own) | hold | fail (no site) | unknown | conditions hold | fail | unknown | unknown share |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| `{r[0]}` | {r[1]} | {r[2]} | {r[3]} ({r[4]}) | {r[5]} | {r[6]} | {r[7]} | {r[8]} | {r[9]:.1f} % |")
    n = tot["c_holds"] + tot["c_fails"] + tot["c_unknown"]
    share = 100.0 * tot["c_unknown"] / n if n else 0.0
    print(f"| all | {tot['cards']} | {tot['holds']} | {tot['fails']} | {tot['unknown']} | {tot['c_holds']} | "
          f"{tot['c_fails']} | {tot['c_unknown']} | {share:.1f} % |")
    if unknowns:
        print("\nUnknown conditions:\n")
        for t, cid, pred, why in unknowns:
            print(f"- `{t}`: `{cid}` `{pred}`: {why}")
    if details and fails:
        print("\nFailing cards, first reason:\n")
        for t, cid, where, why in fails:
            print(f"- `{t}`: `{cid}` at {where}: {why}")


if __name__ == "__main__":
    main()
