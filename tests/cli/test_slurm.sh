#!/usr/bin/env bash
# The Slurm executor against a real one-node cluster on 127.0.0.1 (scripts/slurm_test_cluster.sh
# installs slurm-wlm and munge when missing, starts munged, slurmctld and slurmd directly, and this
# test stops them), judged by the stand-in judge (no GPU, no nvcc): a walk and an optimization
# through job arrays equal the ones judged in process; tasks requeued by Slurm or killed mid-way
# are waited for or resubmitted and the walk still ends the same; a cluster that refuses jobs is a
# clear error that loses nothing stored; Ctrl-C cancels the outstanding jobs. Also measures the
# Slurm path's overhead per judgement on this cluster (printed; docs/cluster.md).
set -u
K=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-slurm.XXXXXX")
cleanup() {
    "$SRC/scripts/slurm_test_cluster.sh" stop "$tmp/cluster" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export KLINEAGE_CACHE="$tmp/cache"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
T=$SRC/tests/data/cluster/sqadd
SAME="$SRC/tests/cli/same_documents.py"

if ! "$SRC/scripts/slurm_test_cluster.sh" start "$tmp/cluster" >"$tmp/start.log" 2>&1; then
    echo "FAIL: the test cluster did not start: $(tail -5 "$tmp/start.log")"
    exit 1
fi
. "$tmp/cluster/env"
S=(--judge stand-in --executor slurm --spool "$tmp/spool")

# wait until squeue lists a RUNNING klineage task; prints its id (ARRAY_INDEX)
running_task() {
    for _ in $(seq 300); do
        local t
        t=$(squeue -h -r -n klineage -t RUNNING -o %i 2>/dev/null | head -1)
        [ -n "$t" ] && { echo "$t"; return 0; }
        sleep 0.1
    done
    return 1
}

# wait until squeue lists a klineage task that started RUNNING less than a second ago and is not one
# of the ids in $1 (while process $2, when given, runs); prints its id. A task picked this way is mostly mid-judgement (the slow walk's
# judgements take 3 s), so killing it leaves no result; but under load one may already have written
# its result and be on its way out, and then nothing is resubmitted: when the walk has resubmitted
# nothing 10 s after the kill, the test kills a second such task (the walk resubmits two at most).
fresh_task() {
    for _ in $(seq 900); do
        local t
        t=$(squeue -h -r -n klineage -t RUNNING -o '%i %M' 2>/dev/null |
            awk -v skip=" $1 " '$2 == "0:00" && index(skip, " " $1 " ") == 0 { print $1; exit }')
        [ -n "$t" ] && { echo "$t"; return 0; }
        [ -z "${2:-}" ] || kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# ---- a walk and an optimization through Slurm equal the ones judged in process -----------------------
t0=$(date +%s.%N)
"$K" --judge stand-in --db "$tmp/here.db" --json lineage "$T" --probes 1 >"$tmp/walk-here.json" 2>"$tmp/err" ||
    fail "walk in process: $(tail -2 "$tmp/err")"
t1=$(date +%s.%N)
cp "$tmp/here.db" "$tmp/lib.db"
"$K" --judge stand-in --executor slurm --spool "$tmp/spool-walk" --db "$tmp/slurm.db" --json lineage "$T" --probes 1 \
    >"$tmp/walk-slurm.json" 2>"$tmp/walk-slurm.err" || fail "walk through Slurm: $(tail -3 "$tmp/walk-slurm.err")"
t2=$(date +%s.%N)
python3 "$SAME" "$tmp/walk-here.json" "$tmp/walk-slurm.json" || fail "the walk through Slurm differs from the walk in process"
"$K" --judge stand-in --db "$tmp/here.db" --json optimize "$T" --budget 8 >"$tmp/opt-here.json" 2>"$tmp/err" ||
    fail "optimize in process: $(tail -2 "$tmp/err")"
cp "$tmp/lib.db" "$tmp/slurm-opt.db"
"$K" "${S[@]}" --db "$tmp/slurm-opt.db" --json optimize "$T" --budget 8 >"$tmp/opt-slurm.json" 2>"$tmp/err" ||
    fail "optimize through Slurm: $(tail -3 "$tmp/err")"
python3 "$SAME" "$tmp/opt-here.json" "$tmp/opt-slurm.json" || fail "the optimization through Slurm differs"
# the overhead of the Slurm path: the same walk, through Slurm against in process, per job array
arrays=$(ls -d "$tmp"/spool-walk/run-*/b* 2>/dev/null | wc -l)
tasks=$(ls -d "$tmp"/spool-walk/run-*/b*/t* 2>/dev/null | wc -l)
python3 - "$t0" "$t1" "$t2" "$arrays" "$tasks" <<'EOF'
import sys
t0, t1, t2 = (float(x) for x in sys.argv[1:4])
arrays, tasks = int(sys.argv[4]), int(sys.argv[5])
extra = (t2 - t1) - (t1 - t0)
print(f"slurm overhead: a walk of {tasks} stand-in judgements in {arrays} job arrays took {t2 - t1:.1f} s through "
      f"Slurm, {t1 - t0:.1f} s in process: {extra / max(arrays, 1):.2f} s more per array, "
      f"{extra / max(tasks, 1):.2f} s per judgement")
EOF

# ---- tasks requeued by Slurm, and killed mid-way: the walk waits, resubmits and ends the same ----------
{ cat "$T/expert.cu"; echo "// klineage-stand-in: sleep=3"; } >"$tmp/slow.cu"
"$K" --judge stand-in --db "$tmp/slow-here.db" --json lineage "$T" --expert "$tmp/slow.cu" --probes 0 --no-skills \
    >"$tmp/slow-here.json" 2>"$tmp/err" || fail "slow walk in process: $(tail -2 "$tmp/err")"
"$K" "${S[@]}" --db "$tmp/slow.db" --json lineage "$T" --expert "$tmp/slow.cu" --probes 0 --no-skills \
    >"$tmp/slow-slurm.json" 2>"$tmp/slow-slurm.err" &
pid=$!
if t=$(running_task); then
    scontrol requeue "$t" || fail "scontrol requeue $t"
else
    fail "no task of the slow walk ran"
fi
killed=""
for _ in 1 2; do # the walk resubmits at most 2 tasks
    t=$(fresh_task "$killed" "$pid") || break
    scancel --signal=KILL "$t" || fail "scancel --signal=KILL $t" # its job ends without a result
    killed="$killed $t"
    for _ in $(seq 100); do # the walk notices within a poll or two
        grep -q "resubmitted" "$tmp/slow-slurm.err" && break 2
        kill -0 $pid 2>/dev/null || break 2
        sleep 0.1
    done
done
[ -n "$killed" ] || fail "no task of the slow walk started after the requeue"
wait $pid || fail "the walk with a requeued and a killed task failed: $(tail -3 "$tmp/slow-slurm.err")"
python3 "$SAME" "$tmp/slow-here.json" "$tmp/slow-slurm.json" || fail "the walk with requeued tasks differs"
grep -q "resubmitted" "$tmp/slow-slurm.err" || fail "the killed task was not resubmitted: $(tail -3 "$tmp/slow-slurm.err")"

# ---- a cluster that refuses jobs: a clear error, nothing stored is lost --------------------------------
# (the walk is stored after every step: it is interrupted once its first step is in, the cluster stops
# taking jobs, and the walk is taken up again; stopping the cluster while the walk runs would race its
# next sbatch, which an inactive partition queues for ever when it comes first)
"$K" "${S[@]}" --db "$tmp/refuse.db" lineage "$T" --expert "$tmp/slow.cu" --probes 0 --no-skills >/dev/null \
    2>"$tmp/first.err" &
pid=$!
for _ in $(seq 600); do grep -q "step 1:" "$tmp/first.err" && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "the walk to be refused, interrupted after its first step, exited $rc: $(tail -2 "$tmp/first.err")"
scontrol update PartitionName=debug State=INACTIVE
timeout 300 "$K" "${S[@]}" --db "$tmp/refuse.db" lineage "$T" --expert "$tmp/slow.cu" --probes 0 --no-skills >/dev/null \
    2>"$tmp/refused.err"
rc=$?
scontrol update PartitionName=debug State=UP
[ $rc -eq 1 ] || fail "a refused job array exited $rc, expected 1: $(tail -2 "$tmp/refused.err")"
grep -q "the cluster refused the job array (sbatch exit 1): sbatch: error: Batch job submission failed" \
    "$tmp/refused.err" || fail "no clear message for a refused array: $(tail -2 "$tmp/refused.err")"
"$K" "${S[@]}" --db "$tmp/refuse.db" --json lineage "$T" --expert "$tmp/slow.cu" --probes 0 --no-skills \
    >"$tmp/refuse-slurm.json" 2>"$tmp/err" || fail "the walk resumed once the cluster took jobs again: $(tail -2 "$tmp/err")"
grep -q "(1 step(s) stored)" "$tmp/err" || fail "the stored step was lost: $(head -2 "$tmp/err")"
python3 "$SAME" "$tmp/slow-here.json" "$tmp/refuse-slurm.json" || fail "the resumed walk differs"

# ---- Ctrl-C: the outstanding jobs are cancelled ----------------------------------------------------------
{ cat "$T/expert.cu"; echo "// klineage-stand-in: sleep=60"; } >"$tmp/slower.cu"
"$K" "${S[@]}" --db "$tmp/int.db" lineage "$T" --expert "$tmp/slower.cu" --probes 0 --no-skills >/dev/null \
    2>"$tmp/int.err" &
pid=$!
running_task >/dev/null || fail "no task of the interrupted walk ran"
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "the interrupted walk exited $rc, expected 130: $(tail -2 "$tmp/int.err")"
for _ in $(seq 50); do
    [ -z "$(squeue -h -n klineage -o %i 2>/dev/null)" ] && break
    sleep 0.2
done
[ -z "$(squeue -h -n klineage -o %i 2>/dev/null)" ] || fail "jobs left after Ctrl-C: $(squeue -h -n klineage)"

if [ $fails -gt 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "test_slurm: all passed"
