#!/usr/bin/env python3
"""Apply sequences of rules-catalog transforms to each built-in naive kernel and gate the
result against the task's expert (same run), for docs/rules.md.

    scripts/rules_sequences.py [--klineage BIN] [--measure record|replay|live] [--out DIR] [TASK...]

Each step names a transform and its parameters; it is applied at the first site the
catalog lists as applicable for it (in the file as it is after the steps before). A step
that has no applicable site, or that the transform refuses, is reported and skipped. The
final kernel is written to OUT/<task>.cu and gated with --baseline expert.cu, so its
speedup is t(expert) / t(final): the fraction of the expert's speed it reaches."""
import json
import os
import subprocess
import sys

# The sequences: what a kernel engineer would apply to each naive kernel, in order. A task may
# have several (a list of lists): each is gated and reported on its own row.
SEQUENCES = {
    "softmax": ["row-parallel unit=block threads=256", "vectorize width=4", "fast-math", "restrict",
                "launch-bounds"],
    "layernorm": ["row-parallel unit=block threads=256", "vectorize width=4", "fast-math", "restrict",
                  "launch-bounds"],
    "reduce_sum": ["grid-stride", "block-reduce", "vectorize width=4", "warp-reduce", "restrict", "launch-bounds"],
    "histogram": [["grid-stride", "privatize", "restrict", "launch-bounds"],
                  ["block-size threads=512", "grid-stride waves=4", "privatize copies=32", "restrict", "launch-bounds"],
                  ["grid-stride", "privatize", "vectorize width=16", "restrict", "launch-bounds"],
                  ["block-size threads=512", "grid-stride waves=4", "privatize copies=32", "vectorize width=16",
                   "restrict", "launch-bounds"]],
    "transpose": [["coalesce", "smem-pad", "restrict", "launch-bounds"],
                  ["coalesce", "smem-pad", "block-size bx=32 by=32", "restrict", "launch-bounds"],
                  ["block-size bx=32 by=32", "coalesce rows_per_thread=4", "smem-pad", "restrict", "launch-bounds",
                   "unroll", "unroll"],
                  ["block-size bx=32 by=32", "coalesce rows_per_thread=8", "smem-pad", "restrict", "launch-bounds",
                   "unroll", "unroll"]],
    "blur": [["smem-tile", "restrict", "launch-bounds", "unroll"],
             ["smem-tile max_radius=3", "restrict", "launch-bounds", "specialize values=5,7"],
             ["smem-tile max_radius=3 outputs_x=4", "restrict", "launch-bounds"],
             ["smem-tile max_radius=3 outputs_x=4", "restrict", "launch-bounds", "specialize values=5,7"]],
    "sgemm": ["smem-tile", "register-tile TM=8 TN=8", "restrict", "launch-bounds", "unroll"],
    "hgemm": [["tensor-core warps_m=2 warps_n=2 frags_m=2 frags_n=2", "restrict", "launch-bounds"],
              ["tensor-core warps_m=4 warps_n=2 frags_m=2 frags_n=2", "restrict", "launch-bounds", "unroll",
               "unroll"],
              ["tensor-core warps_m=4 warps_n=2 frags_m=2 frags_n=2 bk=32 vector_loads=1", "restrict",
               "launch-bounds"],
              ["tensor-core warps_m=4 warps_n=2 frags_m=2 frags_n=2 bk=64 vector_loads=1", "restrict",
               "launch-bounds"],
              ["restrict", "tensor-core warps_m=2 warps_n=2 frags_m=4 frags_n=4 bk=32 stages=3", "launch-bounds"],
              ["restrict", "tensor-core warps_m=2 warps_n=2 frags_m=4 frags_n=4 bk=32 stages=4", "launch-bounds"]],
}


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def main():
    argv = sys.argv[1:]
    kl, measure, out = "build/klineage", "record", "out/rules"
    tasks = []
    while argv:
        a = argv.pop(0)
        if a == "--klineage":
            kl = argv.pop(0)
        elif a == "--measure":
            measure = argv.pop(0)
        elif a == "--out":
            out = argv.pop(0)
        else:
            tasks.append(a)
    tasks = tasks or list(SEQUENCES)
    os.makedirs(out, exist_ok=True)
    rows = []
    for t, seq, final in ((t, seq, f"{out}/{t}.cu" if k == 0 else f"{out}/{t}-{k + 1}.cu")
                          for t in tasks
                          for k, seq in enumerate(SEQUENCES[t] if isinstance(SEQUENCES[t][0], list) else [SEQUENCES[t]])):
        tdir = f"tasks/{t}"
        src = open(f"{tdir}/naive.cu").read()
        applied, skipped = [], []
        for step in seq:
            name, *params = step.split()
            cur = f"{out}/{t}.step.cu"
            open(cur, "w").write(src)
            r = run([kl, "--quiet", "rewrite", cur, "--list", "--json", "--transform", name, "--task", tdir])
            # the sites to apply at: applicable ones, and those refused with the defaults only (a
            # step's parameters may be what they need, e.g. specialize's values)
            sites = [s for s in (json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else [])
                     if (s.get("direction") == "applicable" or
                         (s.get("direction") == "refused" and s.get("refused") == "apply"))
                     and not s.get("why_not")]
            if not sites:
                skipped.append(f"{name} (no applicable site)")
                continue
            done = False
            for s in sites:
                cmd = [kl, "--quiet", "rewrite", cur, "--apply", f"{name}@{s['site']}", "--task", tdir]
                for p in params:
                    cmd += ["--param", p]
                r = run(cmd)
                if r.returncode == 0 and r.stdout.strip():
                    src = r.stdout
                    applied.append(f"{name}@{s['site']}" + (" " + " ".join(params) if params else ""))
                    done = True
                    break
            if not done:
                skipped.append(f"{name} ({(r.stderr.strip().splitlines() or ['refused'])[-1]})")
        open(final, "w").write(src)
        r = run([kl, "--measure", measure, "gate", tdir, final, "--baseline", f"{tdir}/expert.cu", "--json"])
        frac, why = None, ""
        try:
            v = json.loads(r.stdout)
            p = v.get("stages", {}).get("profile", {}) or {}
            frac = p.get("speedup")
            if not v.get("pass"):
                why = v.get("reason", "")
        except ValueError:
            why = (r.stderr.strip().splitlines() or ["no verdict"])[-1]
        rows.append((t, applied, skipped, frac, why))
        print(f"{t}: {' -> '.join(applied) or '(nothing applied)'}; skipped: {', '.join(skipped) or '-'}; "
              f"fraction of expert speed: {frac}; {why}", flush=True)
    with open(f"{out}/table.md", "w") as f:
        f.write("| task | sequence applied to naive.cu | not applicable | fraction of the expert's speed |\n")
        f.write("| --- | --- | --- | --- |\n")
        for t, applied, skipped, frac, why in rows:
            fr = f"{frac:.2f}" if isinstance(frac, (int, float)) else f"— ({why})"
            f.write(f"| `{t}` | {' → '.join(f'`{a}`' for a in applied) or '—'} | {', '.join(skipped) or '—'} | {fr} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
