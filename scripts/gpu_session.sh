#!/usr/bin/env bash
# What one session runs on the GPU machine, in one call per phase. The binaries are built
# on the development machine (tree-sitter linked statically) and carried in .carry/bin;
# nvcc on the GPU machine compiles the candidates and the device runtime.
#   scripts/gpu_session.sh check      build check, gpu info, tests/gpu, the gate's figures
#   scripts/gpu_session.sh suite      vendor timings and the suite table (record)
#   scripts/gpu_session.sh lineage T… the backward walks of tasks T… (record)
#   scripts/gpu_session.sh record T…  suite, rules sequences, walks; at most 8 files to $OUT
#   scripts/gpu_session.sh walks T…   the worker's checks (KL_CHECK_S), then walks only (T: a suite
#                                       task's name, or a task folder's path such as corpus/sumsq)
#   scripts/gpu_session.sh catalog [T…] the rules catalog on the style corpus: every applicable
#                                       site applied once and gated (scripts/gpu_catalog.sh)
#   scripts/gpu_session.sh corpuswalks [T…] the style corpus's experts walked backward (default
#                                       matmul sumsq) into their own archive, archive/corpus-walks.jsonl,
#                                       and their own store: the corpus stays unseen by the card library
#   scripts/gpu_session.sh corpus [T…] the style corpus: every naive and expert kernel of corpus/
#                                       gated (record), the experts' table (scripts/gpu_corpus.sh)
#   scripts/gpu_session.sh gatecorpus  the hardened gate (issue 18): worker smoke test, the corpus
#                                      (recorded), the timer's repeatability, the standalone
#                                      verdicts `task check` replays; about 4-5 minutes
#   scripts/gpu_session.sh cards      issue 16: re-walk what changed, bisect slowdowns, admit the cards
#   scripts/gpu_session.sh optimize   issue 15: bench --optimize --restart-older (runs of another search
#                                      revision run again; leave-one-out, blind → memory → skills,
#                                      KL_BUDGET gate calls each, default 40; KL_RANKING the skills
#                                      ranking, KL_POLICIES a subset, KL_OPT_DIRS task folders
#                                      instead (--tasks, the whole library), KL_NO_COMPARE=1 no
#                                      expert/vendor judgements), recorded, stopped with
#                                      SIGINT at KL_OPTIMIZE_S (default 540 s; every run so far is kept
#                                      and the next call goes on); the table to $OUT
#   scripts/gpu_session.sh pool       one gate batch as today, on --gpus 0 and on --gpus 0,0 (docs/cluster.md)
#   scripts/gpu_session.sh variants [T…] candidate experts (tasks/T/variants/*.cu) gated beside the expert
#   scripts/gpu_session.sh all | final T… older one-call sessions (suite, corpus, gate figures / suite, walks)
# Results (the archive, logs, tables) go to $OUT when it is set. A device call brings back at most
# 8 files: run one phase per call (gatecorpus and pool together write 12 and the archive was left
# behind on 2026-12-02), and on a warm machine fetch verdicts.jsonl.gz before the next call syncs
# the tree again (archive/verdicts.jsonl is tracked: the sync replaces it).
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
# The archive outgrew what a device call carries beside the binaries (64 MiB in all): carried
# gzipped as .carry/verdicts.jsonl.gz with the tracked file left empty for the call, it is
# unpacked here first (docs/CONTRIBUTING.md).
if [ -s .carry/verdicts.jsonl.gz ] && [ ! -s archive/verdicts.jsonl ]; then
    gzip -dc .carry/verdicts.jsonl.gz >archive/verdicts.jsonl || exit 1
fi
kl() { "$KLINEAGE" --db "$db" --measure record "$@"; }
log() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
# The archive back through $OUT, compressed: it grew past the 16 MiB a returned file may have.
save_archive() { gzip -c archive/verdicts.jsonl >"$out/verdicts.jsonl.gz" 2>/dev/null || true; }
# The walks of tasks T…, each under its own limit (KL_LINEAGE_S_<task>, else KL_LINEAGE_S;
# the proposals of a version compile KL_JOBS at a time, 16 by default: one at a time, a blur walk
# spent most of its 200 s in nvcc;
# SIGINT, then SIGKILL 20 s later — a killed walk loses what it did since its last export;
# corpuswalks waits 90 s: its GEMM's judgements take longer to stop);
# KL_RESTART / KL_CONTINUE: space-separated tasks walked with --restart / --continue.
walk_tasks() {
    mkdir -p /tmp/walks
    local t lim_var restart dir
    for dir in "$@"; do
        # a name is a suite task (tasks/NAME); a path (corpus/matmul) is walked where it is
        case "$dir" in */*) t=$(basename "$dir") ;; *) t=$dir dir="tasks/$dir" ;; esac
        log "lineage $dir" | tee -a "$out/record.log"
        lim_var="KL_LINEAGE_S_$t"
        restart=()
        case " ${KL_RESTART:-} " in *" $t "*) restart=(--restart) ;; esac
        case " ${KL_CONTINUE:-} " in *" $t "*) restart=(--continue) ;; esac
        timeout -k 20 -s INT "${!lim_var:-${KL_LINEAGE_S:-120}}" "$KLINEAGE" --db "$db" --jobs "${KL_JOBS:-16}" --measure record lineage \
            "$dir" "${restart[@]}" --probes "${KL_PROBES:-2}" --probe-min-gain "${KL_PROBE_MIN_GAIN:-1.05}" \
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
corpuswalks)
    # The style corpus's experts walked backward (issue 17: at least 5 steps, a root within 1.5x of
    # the naive kernel, the steps carrying 80 % of the expert's speedup). Their cards must not join
    # the library the optimizer is measured with on the corpus (it would no longer be unseen), so
    # the walks record into archive/corpus-walks.jsonl with a store of their own; replay with
    #   klineage --measure replay lineage corpus/T --archive archive/corpus-walks.jsonl --db /tmp/corpus-walks.db
    # (a store of its own: replayed into yours, the walk's cards would join your library)
    # KL_LINEAGE_S_<task> (else KL_LINEAGE_S, 200) bounds each walk; a cut walk resumes;
    # KL_RESTART / KL_CONTINUE as for walks.
    cw_db=${KL_CORPUS_WALK_DB:-/tmp/klineage-corpus-walks.db}
    touch archive/corpus-walks.jsonl
    [ $# -eq 0 ] && set -- matmul sumsq
    for t in "$@"; do
        log "lineage corpus/$t" | tee -a "$out/record.log"
        lim_var="KL_LINEAGE_S_$t"
        restart=()
        case " ${KL_RESTART:-} " in *" $t "*) restart=(--restart) ;; esac
        case " ${KL_CONTINUE:-} " in *" $t "*) restart=(--continue) ;; esac
        # -k 90: a walk at matmul's 4096^3 did not stop within 20 s of SIGINT (a batch of judgements
        # in flight) and its SIGKILL lost the walk (2026-12-04: four steps gone); since then a
        # recording walk exports the archive after every stored version, so a kill loses at most
        # the version in progress
        timeout -k 90 -s INT "${!lim_var:-${KL_LINEAGE_S:-200}}" "$KLINEAGE" --db "$cw_db" --jobs "${KL_JOBS:-16}" \
            --measure record lineage "corpus/$t" "${restart[@]}" --archive archive/corpus-walks.jsonl --probes "${KL_PROBES:-1}" \
            --probe-min-gain "${KL_PROBE_MIN_GAIN:-1.05}" >"$out/lineage-corpus-$t.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        grep -v '^\[' "$out/lineage-corpus-$t.txt" | tail -30 >>"$out/record.log"
        gzip -c archive/corpus-walks.jsonl >"$out/corpus-walks.jsonl.gz"
    done
    ;;
catalog)
    # the rules catalog on the style corpus (issue 17): about 4 minutes; KL_CATALOG_S bounds it
    timeout -k 20 "${KL_CATALOG_S:-290}" bash scripts/gpu_catalog.sh "$@" >"$out/catalog.txt" 2>&1
    echo "exit $?"
    tail -45 "$out/catalog.txt"
    ;;
corpus)
    # the style corpus (corpus/README.md): about 3 minutes; KL_CORPUS_S bounds the whole phase
    timeout -k 20 "${KL_CORPUS_S:-300}" bash scripts/gpu_corpus.sh "$@" >"$out/style-corpus.txt" 2>&1
    echo "exit $?"
    tail -50 "$out/style-corpus.txt"
    ;;
gatecorpus)
    # The gate's corpus with the hardening classes (reads past an input, host work between
    # copies, a launch with no kernel, uninitialised shared memory, races, a slow reference,
    # a forbidden import, a candidate trying to leave the sandbox), its verdicts recorded; then
    # the timer judged again and again on a correct kernel (the intermittent "could not
    # attribute" error must not show); then `task check` of every shipped task recorded, so
    # that `--measure replay task check tasks/T` has the naive kernel's standalone verdict.
    # Budget: smoke 40 s, corpus 160 s, timer 20 s, task checks 100 s (each part has a limit).
    corpus_start=$(date +%s)
    log "smoke" | tee -a "$out/gatecorpus.log"
    timeout 90 bash tests/gpu/test_worker_smoke.sh >"$out/smoke.txt" 2>&1
    echo "exit $? ($(($(date +%s) - corpus_start)) s)" | tee -a "$out/gatecorpus.log"
    tail -5 "$out/smoke.txt" >>"$out/gatecorpus.log"
    log "corpus objects, compiled at once" | tee -a "$out/gatecorpus.log"
    arch=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 | tr -d ' .')
    for t in vadd rowsum mm; do
        files=()
        [ -d "tests/gpu/cands/$t" ] && files=(tests/gpu/cands/$t/*.cu)
        [ -f "tests/gpu/tasks/$t/naive.cu" ] && files+=("tests/gpu/tasks/$t/naive.cu")
        timeout 120 "$KLINEAGE" --quiet --jobs 16 gate --compile-only --arch "$arch" "tests/gpu/tasks/$t" "${files[@]}" \
            >/dev/null 2>&1
    done
    log "corpus" | tee -a "$out/gatecorpus.log"
    KL_CORPUS_RECORD=1 timeout 240 bash tests/gpu/test_gate_corpus.sh >"$out/corpus.txt" 2>&1
    echo "exit $? ($(($(date +%s) - corpus_start)) s)" | tee -a "$out/gatecorpus.log"
    grep -vE '^    \|' "$out/corpus.txt" >>"$out/gatecorpus.log"
    save_archive
    log "timer: a correct kernel judged ${KL_TIMER_REPS:-20} times" | tee -a "$out/gatecorpus.log"
    bad=0
    for i in $(seq "${KL_TIMER_REPS:-20}"); do
        timeout 60 "$KLINEAGE" --quiet --db /tmp/kl-timer.db gate --refresh tests/gpu/tasks/rowsum \
            tests/gpu/cands/rowsum/good.cu >/tmp/kl-timer.out 2>&1 || { bad=$((bad + 1)); tail -2 /tmp/kl-timer.out >>"$out/gatecorpus.log"; }
    done
    echo "timer: $bad of ${KL_TIMER_REPS:-20} judgements did not pass ($(($(date +%s) - corpus_start)) s)" |
        tee -a "$out/gatecorpus.log"
    log "task check, recorded" | tee -a "$out/gatecorpus.log"
    for t in $(python3 -c 'import json; print(" ".join(e["task"] for e in json.load(open("tasks/suite.json"))["tasks"]))'); do
        timeout 90 "$KLINEAGE" --db "$db" --measure record task check "tasks/$t" >"/tmp/kl-check-$t.txt" 2>&1
        echo "task check $t: exit $? ($(($(date +%s) - corpus_start)) s)" | tee -a "$out/gatecorpus.log"
        grep -E '^(naive|expert) |warning|error' "/tmp/kl-check-$t.txt" >>"$out/gatecorpus.log"
    done
    save_archive
    echo "gatecorpus: $(($(date +%s) - corpus_start)) s in all" | tee -a "$out/gatecorpus.log"
    ;;
cards)
    # Issue 16 (docs/lineages.md, "The rework of 2026-12-02"). Device time: about 8-10 minutes
    # (the limits below add up to 200 + 200 + 7 x 30 + 130 s); split it over two calls with
    # KL_ADMIT_S=0 KL_BISECT_S=0 (the walks) and then KL_CARDS_REWALK="" (bisection and admission):
    #  1. walk again the lineages whose walks change under "gains where the code runs"
    #     (KL_CARDS_REWALK, default "softmax layernorm": a dispatch's general path was measured at
    #     a bench shape that never runs it), --restart-older (a walk already made with the new
    #     rules, finished or cut at its time limit, resumes), --bisect, each under
    #     KL_LINEAGE_S_<task> seconds (default 200), KL_JOBS compiles at once (16);
    #  2. every other stored walk loaded again (its cards extracted: the archive holds none) and
    #     its slowdowns bisected (KL_BISECT probes each, default 2; KL_BISECT_S seconds per task,
    #     default 30);
    #  3. the whole library admitted (skills admit, one trial on another task per card where its
    #     conditions hold; KL_ADMIT_S seconds, default 130; an interrupted admission keeps the
    #     cards it finished, and the same call again resumes from the stored verdicts);
    #  4. the tables: cards.txt (walk summaries, skills list, the admission table, the
    #     leave-one-out match table) and skills-library.md, beside the archive.
    mkdir -p /tmp/walks
    rewalk=${KL_CARDS_REWALK-softmax layernorm}
    bisect=${KL_BISECT:-2}
    for t in $rewalk; do
        log "rewalk $t" | tee -a "$out/record.log"
        lim_var="KL_LINEAGE_S_$t"
        timeout -k 20 -s INT "${!lim_var:-200}" "$KLINEAGE" --db "$db" --jobs "${KL_JOBS:-16}" --measure record \
            lineage "tasks/$t" --restart-older --probes "${KL_PROBES:-2}" --probe-min-gain "${KL_PROBE_MIN_GAIN:-1.05}" \
            --bisect "$bisect" >"/tmp/walks/lineage-$t.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        grep -v '^\[' "/tmp/walks/lineage-$t.txt" | tail -40 >>"$out/record.log"
        save_archive
    done
    for t in transpose histogram reduce_sum softmax layernorm blur sgemm hgemm; do
        case " $rewalk " in *" $t "*) continue ;; esac
        [ "${KL_BISECT_S:-30}" = 0 ] && break
        log "cards of $t (bisect $bisect)" | tee -a "$out/record.log"
        timeout -k 20 -s INT "${KL_BISECT_S:-30}" "$KLINEAGE" --db "$db" --jobs "${KL_JOBS:-16}" --measure record \
            lineage "tasks/$t" --probes "${KL_PROBES:-2}" --probe-min-gain "${KL_PROBE_MIN_GAIN:-1.05}" \
            --bisect "$bisect" >"/tmp/walks/lineage-$t.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        grep -v '^\[' "/tmp/walks/lineage-$t.txt" | tail -4 >>"$out/record.log"
        save_archive
    done
    if [ "${KL_ADMIT_S:-130}" != 0 ]; then
        log "admit" | tee -a "$out/record.log"
        timeout -k 20 -s INT "${KL_ADMIT_S:-130}" "$KLINEAGE" --db "$db" --jobs "${KL_JOBS:-16}" --measure record \
            skills admit --max-other 1 >"/tmp/walks/admit.txt" 2>&1
        echo "exit $?" | tee -a "$out/record.log"
        tail -3 /tmp/walks/admit.txt >>"$out/record.log"
        save_archive
    fi
    {
        for t in transpose histogram reduce_sum softmax layernorm blur sgemm hgemm; do
            echo "== $t"; "$KLINEAGE" --db "$db" --measure replay lineage "tasks/$t" --no-skills 2>/dev/null | tail -8
        done
        echo "== skills list"; "$KLINEAGE" --db "$db" skills list
        echo "== admission"; cat /tmp/walks/admit.txt
        echo "== match (leave-one-out)"; python3 scripts/skills_match_table.py --klineage "$KLINEAGE" --db "$db"
    } >"$out/cards.txt" 2>&1
    "$KLINEAGE" --db "$db" skills export --format md -o "$out/skills-library.md" >/dev/null 2>&1
    python3 scripts/verdict_times.py archive/verdicts.jsonl >>"$out/record.log" 2>&1
    tar czf "$out/walks.tgz" -C /tmp walks 2>/dev/null
    ;;
pool)
    # docs/cluster.md: the pool of workers on one GPU. The same gate batch (the corpus' vadd
    # kernels that end quickly) judged three times, each into a fresh store, live: as today (no
    # executor), by a pool of one worker (--gpus 0) and of two workers sharing the GPU (--gpus 0,0);
    # the verdicts must agree (pass, failing stage; same-run ratios within the gate's repeatability;
    # the keys equal). About 1 minute; nothing recorded (the archive keeps today's verdicts).
    files=(good cached fork_join off_by_one oob_by_one oob_far other_stream partial skips_work trap)
    paths=()
    for f in "${files[@]}"; do paths+=("tests/gpu/cands/vadd/$f.cu"); done
    for how in today one two; do
        opt=()
        [ $how = one ] && opt=(--gpus 0)
        [ $how = two ] && opt=(--gpus 0,0)
        log "pool: $how ${opt[*]}"
        rm -f "/tmp/pool-$how.db"*
        start=$(date +%s.%N)
        timeout 150 "$KLINEAGE" --db "/tmp/pool-$how.db" --measure live "${opt[@]}" --json gate tests/gpu/tasks/vadd \
            "${paths[@]}" --timeout 30 >"$out/pool-$how.json" 2>"$out/pool-$how.err"
        echo "exit $? in $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$start") s"
        tail -3 "$out/pool-$how.err"
    done
    python3 - "$out"/pool-today.json "$out"/pool-one.json "$out"/pool-two.json <<'PY' | tee "$out/pool.txt"
import json, sys
runs = [[json.loads(l) for l in open(f) if l.strip()] for f in sys.argv[1:]]
bad = 0
for i, today in enumerate(runs[0]):
    row = [r[i] if i < len(r) else {} for r in runs]
    name = today["candidate"]["name"].rsplit("/", 1)[-1]
    sp = [v.get("stages", {}).get("profile", {}).get("speedup") for v in row]
    where = [(v.get("run", {}).get("placement") or {}).get("gpu", {}).get("uuid", "-") for v in row]
    same = all(v.get("key") == today["key"] and v.get("pass") == today["pass"] and
               v.get("failed_stage") == today.get("failed_stage") for v in row)
    close = all(s is None or sp[0] is None or abs(s / sp[0] - 1) < 0.05 for s in sp)
    bad += not (same and close)
    print(f"{name:<18} pass={[v.get('pass') for v in row]} stage={today.get('failed_stage')} speedup={sp} "
          f"gpu={where} {'ok' if same and close else 'DIFFERENT'}")
print("pool: all verdicts agree" if not bad else f"pool: {bad} verdict(s) differ")
PY
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
optimize)
    log "bench --optimize" | tee -a "$out/optimize.log"
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout -k 30 -s INT "${KL_OPTIMIZE_S:-540}" "$KLINEAGE" --db "$db" --jobs "${KL_JOBS:-16}" --measure record \
        bench --optimize --restart-older --budget "${KL_BUDGET:-40}" ${KL_POLICIES:+--policies "$KL_POLICIES"} \
        ${KL_RANKING:+--ranking "$KL_RANKING"} \
        ${KL_OPT_TASKS:+$(for t in $KL_OPT_TASKS; do printf -- '--task %s ' "$t"; done)} \
        ${KL_OPT_DIRS:+--tasks $KL_OPT_DIRS} ${KL_NO_COMPARE:+--no-compare} \
        -o "$out/optimize-table.md" >"$out/optimize.txt" 2>&1
    echo "exit $? ($(($(date +%s) - start)) s)" | tee -a "$out/optimize.log"
    grep -v '^\[' "$out/optimize.txt" | tail -5 >>"$out/optimize.log"
    tail -45 "$out/optimize.txt"
    save_archive
    ;;
*)
    echo "usage: $0 check|suite|lineage|all|final|record|walks|catalog|gatecorpus|corpus|cards|optimize|pool|variants TASK…" >&2
    exit 2
    ;;
esac
save_archive
log "done"
