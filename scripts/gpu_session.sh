#!/usr/bin/env bash
# What one session runs on the GPU machine, in one call per phase. The binaries are built
# on the development machine (tree-sitter linked statically) and carried in .carry/bin;
# nvcc on the GPU machine compiles the candidates and the device runtime.
#   scripts/gpu_session.sh check      build check, gpu info, tests/gpu, the gate's figures
#   scripts/gpu_session.sh suite      vendor timings and the suite table (record)
#   scripts/gpu_session.sh lineage T… the backward walks of tasks T… (record)
#   scripts/gpu_session.sh record T…  suite, rules sequences, walks; at most 8 files to $OUT
#   scripts/gpu_session.sh walks T…   the worker's checks (KL_CHECK_S), then walks only
#   scripts/gpu_session.sh catalog [T…] the rules catalog on the style corpus: every applicable
#                                       site applied once and gated (scripts/gpu_catalog.sh)
# Results (the archive, logs, tables) go to $OUT when it is set.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bin=${KL_BIN:-$here/.carry/bin}
out=${OUT:-$here/out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
export KLINEAGE="$bin/klineage" KLINEAGE_WORKER="$bin/klineage-worker" KL_SOURCE_DIR="$here"
export KLINEAGE_CACHE=${KLINEAGE_CACHE:-/tmp/klineage-cache}
db=${KL_DB:-/tmp/klineage-session.db}
kl() { "$KLINEAGE" --db "$db" --measure record "$@"; }
log() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
# The archive back through $OUT, compressed: it grew past the 16 MiB a returned file may have.
save_archive() { gzip -c archive/verdicts.jsonl >"$out/verdicts.jsonl.gz" 2>/dev/null || true; }
# The walks of tasks T…, each under its own limit (KL_LINEAGE_S_<task>, else KL_LINEAGE_S;
# the proposals of a version compile KL_JOBS at a time, 16 by default: one at a time, a blur walk
# spent most of its 200 s in nvcc;
# SIGINT, then SIGKILL 20 s later — a killed walk loses what it did since its last export);
# KL_RESTART / KL_CONTINUE: space-separated tasks walked with --restart / --continue.
walk_tasks() {
    mkdir -p /tmp/walks
    local t lim_var restart
    for t in "$@"; do
        log "lineage $t" | tee -a "$out/record.log"
        lim_var="KL_LINEAGE_S_$t"
        restart=()
        case " ${KL_RESTART:-} " in *" $t "*) restart=(--restart) ;; esac
        case " ${KL_CONTINUE:-} " in *" $t "*) restart=(--continue) ;; esac
        timeout -k 20 -s INT "${!lim_var:-${KL_LINEAGE_S:-120}}" "$KLINEAGE" --db "$db" --jobs "${KL_JOBS:-16}" --measure record lineage \
            "tasks/$t" "${restart[@]}" --probes "${KL_PROBES:-2}" --probe-min-gain "${KL_PROBE_MIN_GAIN:-1.05}" \
            >"/tmp/walks/lineage-$t.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        grep -v '^\[' "/tmp/walks/lineage-$t.txt" | tail -40 >>"$out/record.log"
        save_archive
    done
}
phase=${1:-check}
shift || true

case "$phase" in
check)
    log "machine"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
    nvcc --version | tail -1
    "$KLINEAGE" --version && ldd "$KLINEAGE" | grep -E 'not found|jansson|sqlite|curl|crypto' || true
    "$KLINEAGE" parse tasks/softmax/expert.cu | head -5
    log "gpu info"
    kl gpu info 2>&1 | tee "$out/gpu-info.txt"
    for t in tests/gpu/test_*.sh; do
        log "$t"
        timeout 330 bash "$t" 2>&1 | tee "$out/$(basename "$t" .sh).txt"
    done
    if [ -f tests/gpu/bench_gate.sh ]; then
        log "gate figures"
        bash tests/gpu/bench_gate.sh 2>&1 | tee "$out/bench_gate.txt"
    fi
    ;;
suite)
    log "vendor"
    python3 scripts/vendor_baselines.py >"$out/vendor.json" 2>"$out/vendor.err" || cat "$out/vendor.err"
    cat "$out/vendor.json"
    log "suite"
    kl bench --expert --vendor "$out/vendor.json" -o "$out/suite-table.md" 2>&1 | tee "$out/suite.txt"
    ;;
lineage)
    for t in "$@"; do
        log "lineage $t"
        kl lineage "tasks/$t" --probes "${KL_PROBES:-3}" 2>&1 | tee "$out/lineage-$t.txt"
    done
    ;;
all)
    # one call: the suite first (what the docs need most), then the gate's own checks
    log "smoke"; timeout 120 bash tests/gpu/test_worker_smoke.sh 2>&1 | tee "$out/test_worker_smoke.txt" | tail -15
    log "vendor"
    timeout 150 python3 scripts/vendor_baselines.py >"$out/vendor.json" 2>"$out/vendor.err" || tail -5 "$out/vendor.err"
    cat "$out/vendor.json"
    log "suite"
    timeout 330 "$KLINEAGE" --db "$db" --measure record bench --expert --vendor "$out/vendor.json" -o "$out/suite-table.md" 2>&1 | tee "$out/suite.txt" | grep -v '^\[' | tail -30
    cat "$out/suite-table.md"
    log "corpus"; timeout 200 bash tests/gpu/test_gate_corpus.sh 2>&1 | tee "$out/test_gate_corpus.txt" | grep -vE '^    \|' 
    log "gate figures"; timeout 150 bash tests/gpu/bench_gate.sh 2>&1 | tee "$out/bench_gate.txt"
    ;;
final)
    # the suite recorded (vendor timings from an earlier call of this session), then walks
    log "suite"
    timeout 330 "$KLINEAGE" --db "$db" --measure record bench --expert --vendor "${KL_VENDOR:-$here/.carry/vendor.json}" \
        -o "$out/suite-table.md" >"$out/suite.txt" 2>&1
    save_archive
    cat "$out/suite-table.md"
    for t in "$@"; do
        log "lineage $t"
        timeout -s INT "${KL_LINEAGE_S:-200}" "$KLINEAGE" --db "$db" --measure record lineage "tasks/$t" \
            --probes "${KL_PROBES:-2}" >"$out/lineage-$t.txt" 2>&1
        echo "exit $?"
        grep -v '^\[' "$out/lineage-$t.txt" | tail -5; tail -25 "$out/lineage-$t.txt"
        save_archive
    done
    ;;
record)
    # One call that records what the docs need, with at most 8 files back: the archive,
    # one log, the tables, and a tarball of the per-task logs.
    #   KL_SUITE_S, KL_RULES_S, KL_LINEAGE_S (seconds per walk; KL_LINEAGE_S_<task> for one
    #   task) bound each part; an interrupted walk is stored and resumes on the next call.
    #   KL_SUITE_S=0 / KL_RULES_S=0 leave that part out.
    if [ "${KL_SUITE_S:-150}" != 0 ]; then
        log "suite" | tee -a "$out/record.log"
        timeout "${KL_SUITE_S:-150}" "$KLINEAGE" --db "$db" --measure record bench --expert \
            --vendor "${KL_VENDOR:-$here/.carry/vendor.json}" -o "$out/suite-table.md" >"$out/suite.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        save_archive
    fi
    if [ "${KL_RULES_S:-90}" != 0 ]; then
        log "rules sequences" | tee -a "$out/record.log"
        timeout "${KL_RULES_S:-90}" python3 scripts/rules_sequences.py --klineage "$KLINEAGE" --measure record \
            --out /tmp/rules-seq >>"$out/record.log" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        cp -f /tmp/rules-seq/table.md "$out/rules-table.md" 2>/dev/null
        save_archive
    fi
    walk_tasks "$@"
    tar czf "$out/walks.tgz" -C /tmp walks rules-seq 2>/dev/null
    ;;
walks)
    # The worker's own checks (KL_CHECK_S seconds; 0: skip), then the walks of tasks T… only.
    # KL_RESTART="t1 t2": those walks start again (a stored walk otherwise resumes);
    # KL_CONTINUE="t3": a finished walk goes on from its last version (lineage --continue).
    if [ "${KL_CHECK_S:-0}" != 0 ]; then
        log "smoke" | tee -a "$out/record.log"
        timeout "$KL_CHECK_S" bash tests/gpu/test_worker_smoke.sh >"$out/smoke.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"; tail -5 "$out/smoke.txt" >>"$out/record.log"
        log "corpus" | tee -a "$out/record.log"
        timeout "$KL_CHECK_S" bash tests/gpu/test_gate_corpus.sh >"$out/corpus.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"; grep -vE '^    \|' "$out/corpus.txt" | tail -25 >>"$out/record.log"
    fi
    walk_tasks "$@"
    python3 scripts/verdict_times.py archive/verdicts.jsonl >>"$out/record.log" 2>&1
    tar czf "$out/walks.tgz" -C /tmp walks 2>/dev/null
    ;;
catalog)
    # the rules catalog on the style corpus (issue 17): about 4 minutes; KL_CATALOG_S bounds it
    timeout -k 20 "${KL_CATALOG_S:-290}" bash scripts/gpu_catalog.sh "$@" >"$out/catalog.txt" 2>&1
    echo "exit $?"
    tail -45 "$out/catalog.txt"
    ;;
variants)
    # candidate experts (tasks/T/variants/*.cu) gated next to the current expert, same call;
    # prints median, GB/s, TFLOP/s and the fractions of the device ceilings
    summary() {
        python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f"{f}: unreadable ({e})"); continue
    p = d.get("stages", {}).get("profile", {}) or {}
    c = p.get("candidate", {}) or {}
    fr = p.get("fraction", {}) or {}
    ok = d.get("pass", d.get("ok"))
    why = "" if ok else (d.get("reason") or d.get("summary") or "")
    print(f"{f.split('/')[-1]:<34} pass={ok} median_ms={c.get('median_ms')} gbps={p.get('gbps')} "
          f"tflops={p.get('tflops')} bw={fr.get('bandwidth')} compute={fr.get('compute')} x_naive={p.get('speedup')} {why}")
PY
    }
    for t in ${*:-blur histogram sgemm}; do
        log "variants $t"
        files=("tasks/$t/expert.cu" tasks/$t/variants/*.cu)
        timeout ${KL_VARIANT_S:-240} "$KLINEAGE" --db "$db" --measure record gate "tasks/$t" "${files[@]}" --json \
            >"$out/variants-$t.json" 2>"$out/variants-$t.err"
        echo "exit $?"; tail -3 "$out/variants-$t.err"
        python3 -c "
import json,sys
t=open('$out/variants-$t.json').read()
dec=json.JSONDecoder(); i=0; n=0
while i < len(t):
    while i < len(t) and t[i].isspace(): i+=1
    if i>=len(t): break
    o,j=dec.raw_decode(t,i); i=j; n+=1
    json.dump(o,open('$out/v-$t-%02d.json'%n,'w'))
"
        summary "$out"/v-$t-*.json | tee -a "$out/variants.txt"
        rm -f "$out"/v-$t-*.json "$out/variants-$t.json"
        save_archive
    done
    ;;
*)
    echo "usage: $0 check|suite|lineage|variants|catalog TASK…" >&2
    exit 2
    ;;
esac
save_archive
log "done"
