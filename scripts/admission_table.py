#!/usr/bin/env python3
"""The admission table of issue 16: the roundtrip admission (`klineage skills admit`) summed up
per transform and per task, with the reason each rejected card was rejected.

    python3 scripts/admission_table.py [--klineage build/klineage] [--db FILE] [--measure replay|record]
                                       [--max-other N]

Runs `klineage --json skills admit` on the library in the store (--db, default klineage.db;
replay the eight walks into it first: `klineage --measure replay lineage tasks/T`), replayed from
the archive by default, and prints three Markdown tables: per transform (cards, admitted,
rejected, untried, and why the rejected ones were), per task (the trials run on its kernels and
their verdicts) and one line per rejected card with its reason. Exits non-zero when klineage
fails or its counts disagree with the rows."""
import collections
import json
import subprocess
import sys


def opt(args, flag, default):
    return args[args.index(flag) + 1] if flag in args else default


def reason(card):
    """Why a card was rejected (or untried): its own trial's verdict, in a few words."""
    trials = card["admission"].get("trials", [])
    own = [t for t in trials if t.get("own")]
    t = own[0] if own else (trials[0] if trials else None)
    if t is None:
        return "no trial"
    v, d = t.get("verdict", ""), t.get("detail", "")
    if v == "lost":
        return "lost: %.2fx against %.2fx recorded" % (t.get("gain", 0), t.get("recorded", 0))
    if v == "not-applicable" and "within noise" in d:
        return "within noise: not tried"
    if v == "failed" and "does not apply it" in d:
        return "remove-only transform: no forward rewrite"
    if v == "failed" and ("proposed nothing" in d or "no site in the kernel" in d):
        return "no forward site in its own simpler version"
    if v == "failed" and ("not applicable" in d or "not applied" in d):
        return "the forward rewrite refused its site"
    if v == "failed":
        return "the gate rejected the candidate"
    return v or "?"


def main():
    args = sys.argv[1:]
    kl = opt(args, "--klineage", "build/klineage")
    db = opt(args, "--db", "klineage.db")
    cmd = [kl, "--db", db, "--json", "--measure", opt(args, "--measure", "replay"), "skills", "admit",
           "--max-other", opt(args, "--max-other", "1")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("klineage skills admit: exit %d: %s" % (p.returncode, p.stderr.strip()[-400:]))
    d = json.loads(p.stdout)
    cards = d["cards"]
    per_t = collections.OrderedDict()
    per_task = collections.defaultdict(collections.Counter)
    rejected_rows = []
    for c in sorted(cards, key=lambda c: (c["transform"], c["id"])):
        st = c["admission"]["status"]
        row = per_t.setdefault(c["transform"], {"cards": 0, "admitted": 0, "rejected": 0, "untried": 0,
                                                "why": collections.Counter()})
        row["cards"] += 1
        row[st] += 1
        if st != "admitted":
            r = reason(c)
            row["why"][r] += 1
            rejected_rows.append((c["id"], c["task"], st, r))
        for t in c["admission"].get("trials", []):
            # a card not tried for being within noise names all its own tasks in one trial
            for task in t["task"].split(", "):
                per_task[task][("own " if t.get("own") else "other ") + t["verdict"]] += 1
    n = {k: sum(r[k] for r in per_t.values()) for k in ("cards", "admitted", "rejected", "untried")}
    if (n["admitted"], n["rejected"], n["untried"], n["cards"]) != (d["admitted"], d["rejected"], d["untried"],
                                                                    len(cards)):
        sys.exit("the counts disagree with klineage's: %s against %s" % (n, {k: d[k] for k in d if k != "cards"}))
    print("| transform | cards | admitted | rejected | untried | why not admitted |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, r in per_t.items():
        why = "; ".join("%s (%d)" % (k, v) for k, v in sorted(r["why"].items(), key=lambda kv: (-kv[1], kv[0])))
        print("| %s | %d | %d | %d | %d | %s |" % (name, r["cards"], r["admitted"], r["rejected"], r["untried"],
                                                 why or "–"))
    print("| all | %d | %d | %d | %d | |" % (n["cards"], n["admitted"], n["rejected"], n["untried"]))
    print()
    cols = ["own reproduced", "own lost", "own failed", "own not-applicable", "other reproduced", "other lost",
            "other failed", "other not-applicable"]
    print("| task | " + " | ".join(cols) + " |")
    print("| --- | " + " | ".join("---:" for _ in cols) + " |")
    for task in sorted(per_task):
        print("| %s | %s |" % (task, " | ".join(str(per_task[task][c]) for c in cols)))
    print()
    print("| card | from | admission | why |")
    print("| --- | --- | --- | --- |")
    for cid, task, st, r in rejected_rows:
        print("| `%s` | %s | %s | %s |" % (cid, task, st, r))


if __name__ == "__main__":
    main()
