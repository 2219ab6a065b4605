#!/usr/bin/env bash
# The rules catalog on the style corpus, on the GPU (issue 17, "Measured"): every site
# `klineage rewrite --list` calls applicable on each corpus naive kernel is applied (one step,
# with the parameters --list says it applies with), and every candidate is gated against the
# naive kernel with --measure record (each verdict goes to archive/verdicts.jsonl). Printed: per
# task the candidates, how many pass the gate, the best speedup over naive and its transform;
# then the share of applied candidates that pass and the share of listed sites that apply.
#   scripts/gpu_catalog.sh [TASK...]        default: every task folder of $KL_CORPUS_DIR
# Called by `scripts/gpu_session.sh catalog`; runs alone too, with:
#   KLINEAGE          the klineage binary (default .carry/bin/klineage)
#   KL_DB             the store (default /tmp/klineage-session.db)
#   KL_MEASURE        record (default; needs the GPU) or replay (prints the table from the archive)
#   KL_CORPUS_DIR     the corpus (default corpus/)
#   KL_CATALOG_MAX    candidates per task at most (default 8, in the catalog's order)
#   KL_CATALOG_JOBS   task folders compiled at once before judging (default 8; --jobs 2 each)
#   KL_CATALOG_TASK_S the limit of one task's gate call in seconds (default 60)
#   OUT               where catalog-corpus.txt and catalog-corpus.json go (default ./out)
# Time on the H200 (16 cores): about 30 s of rewriting (CPU), about 1 minute of nvcc for some 150
# candidate files, then 1 to 3 s of worker per verdict (the reference at the bench shape is the
# largest CPU part): about 4 minutes for the 28 tasks at 8 candidates each. KL_CATALOG_MAX=4
# halves it.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
KLINEAGE=${KLINEAGE:-$here/.carry/bin/klineage}
db=${KL_DB:-/tmp/klineage-session.db}
measure=${KL_MEASURE:-record}
corpus=${KL_CORPUS_DIR:-corpus}
max=${KL_CATALOG_MAX:-8}
jobs=${KL_CATALOG_JOBS:-8}
limit=${KL_CATALOG_TASK_S:-60}
out=${OUT:-$here/out}
export PATH=/usr/local/cuda/bin:$PATH
export KL_SOURCE_DIR=${KL_SOURCE_DIR:-$here}
mkdir -p "$out"
work=${KL_CATALOG_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kl-gpu-catalog.XXXXXX")}
mkdir -p "$work"
if [ $# -gt 0 ]; then
    tasks=("$@")
else
    tasks=()
    for d in "$corpus"/*/; do [ -f "$d/task.json" ] && [ -f "$d/naive.cu" ] && tasks+=("$(basename "$d")"); done
fi
if [ ${#tasks[@]} -eq 0 ]; then
    echo "no corpus tasks under $corpus/ (set KL_CORPUS_DIR)" >&2
    exit 1
fi
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*"; }
stamp "catalog on the corpus: ${#tasks[@]} tasks, at most $max candidates each, $(nproc) cores"

# 1. The candidates: every listed applicable site applied once (no GPU needed).
python3 - "$KLINEAGE" "$corpus" "$work" "$max" "${tasks[@]}" <<'PY'
import json, os, subprocess, sys
kl, corpus, work, mx, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
summary = {}
for t in tasks:
    d = os.path.join(corpus, t)
    os.makedirs(os.path.join(work, t), exist_ok=True)
    r = subprocess.run([kl, '--quiet', '--json', 'rewrite', os.path.join(d, 'naive.cu'), '--list', '--task', d],
                       capture_output=True, text=True)
    if r.returncode:
        summary[t] = {'error': r.stderr.strip()[-300:]}
        continue
    sites = [s for s in json.loads(r.stdout) if s['direction'] == 'applicable']
    cands, failed = [], []
    for s in sites[:mx]:
        path = os.path.join(work, t, f"cand-{len(cands) + len(failed):02d}.cu")
        cmd = [kl, '--quiet', 'rewrite', os.path.join(d, 'naive.cu'), '--apply', f"{s['transform']}@{s['site']}",
               '--task', d, '--no-compile-check', '-o', path]
        for k, v in (s.get('applies_with') or {}).items():
            cmd += ['--param', f'{k}={v}']
        q = subprocess.run(cmd, capture_output=True, text=True)
        (cands if q.returncode == 0 else failed).append(
            {'file': path, 'transform': s['transform'], 'site': s['site'], 'params': s.get('applies_with') or {},
             'canonical': 'canonical' in s, 'error': q.stderr.strip()[-200:] if q.returncode else None})
    summary[t] = {'listed': len(sites), 'tried': min(len(sites), mx), 'candidates': cands, 'failed': failed}
json.dump(summary, open(os.path.join(work, 'candidates.json'), 'w'), indent=1)
n = sum(len(v.get('candidates', [])) for v in summary.values())
print(f"{n} candidates from {sum(v.get('listed', 0) for v in summary.values())} applicable sites")
PY
stamp "candidates written"

# 2. Compile everything first (the gate caches objects by content), several task folders at once.
if [ "$measure" != replay ]; then
    printf '%s\n' "${tasks[@]}" | KLINEAGE="$KLINEAGE" db="$db" work="$work" corpus="$corpus" xargs -P "$jobs" -I{} bash -c '
        t={}; fs=("$work/$t"/cand-*.cu)
        [ -e "${fs[0]}" ] && "$KLINEAGE" --db "$db" --jobs 2 gate --compile-only "$corpus/$t" "${fs[@]}" >"$work/compile-$t.txt" 2>&1
        true'
    stamp "compiled"
fi

# 3. Judge: one gate call per task, every candidate against the naive kernel.
for t in "${tasks[@]}"; do
    fs=("$work/$t"/cand-*.cu)
    [ -e "${fs[0]}" ] || continue
    timeout -k 10 "$limit" "$KLINEAGE" --db "$db" --measure "$measure" gate "$corpus/$t" "${fs[@]}" \
        --baseline "$corpus/$t/naive.cu" --json >"$work/gate-$t.jsonl" 2>"$work/gate-$t.err"
    echo "$t: gate exit $?"
done
stamp "judged"

# 4. The table.
python3 - "$work" "$out" "${tasks[@]}" <<'PY'
import json, os, sys
work, out, tasks = sys.argv[1], sys.argv[2], sys.argv[3:]
summary = json.load(open(os.path.join(work, 'candidates.json')))
def verdicts(path):
    text = open(path).read() if os.path.exists(path) else ''
    dec, i, res = json.JSONDecoder(), 0, []
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            o, i = dec.raw_decode(text, i)
        except ValueError:
            break
        res.append(o)
    return res
rows, tot_c, tot_pass, tot_listed, tot_applied, tot_tried = [], 0, 0, 0, 0, 0
for t in tasks:
    s = summary.get(t, {})
    cands = s.get('candidates', [])
    vs = {(v.get('candidate') or {}).get('name'): v for v in verdicts(os.path.join(work, f'gate-{t}.jsonl'))}
    best, npass = None, 0
    for c in cands:
        v = vs.get(c['file']) or {}
        c['pass'] = bool(v.get('pass'))
        c['speedup'] = (v.get('stages', {}).get('profile', {}) or {}).get('speedup')
        c['reason'] = None if c['pass'] else (v.get('reason') or v.get('summary'))
        if c['pass']:
            npass += 1
            if isinstance(c['speedup'], (int, float)) and (best is None or c['speedup'] > best['speedup']):
                best = c
    tot_c += len(cands); tot_pass += npass; tot_listed += s.get('listed', 0)
    tot_tried += s.get('tried', 0); tot_applied += len(cands)
    rows.append((t, s.get('listed', 0), len(cands), npass, best))
lines = ['| task | applicable listed | candidates | pass the gate | best speedup over naive |', '| --- | ---: | ---: | ---: | --- |']
for t, listed, nc, npass, best in rows:
    b = f"{best['speedup']:.2f}x `{best['transform']}@{best['site']}`" if best else '—'
    lines.append(f'| `{t}` | {listed} | {nc} | {npass} | {b} |')
lines.append('')
lines.append(f'{tot_pass} of {tot_c} applied candidates pass the gate ({100.0 * tot_pass / max(tot_c, 1):.0f} %); '
             f'{tot_applied} of {tot_tried} listed sites tried applied ({100.0 * tot_applied / max(tot_tried, 1):.0f} %).')
open(os.path.join(out, 'catalog-corpus.txt'), 'w').write('\n'.join(lines) + '\n')
json.dump(summary, open(os.path.join(out, 'catalog-corpus.json'), 'w'), indent=1)
print('\n'.join(lines))
PY
stamp "done"
