#!/usr/bin/env bash
# The stand-in judge and the local pool of workers (--gpus), without a GPU (docs/cluster.md):
# the stand-in's verdicts are marked everywhere and never reach a measuring store; a walk and an
# optimization on a pool of stand-in slots equal the ones judged in process; a gate batch on the
# pool comes back in input order; a worker that dies on one GPU is retried on another, and the GPU
# that keeps failing is dropped; a candidate that kills or hangs every worker is rejected for it.
# (Slurm: tests/cli/test_slurm.sh.)
set -u
K=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-cluster.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export KLINEAGE_CACHE="$tmp/cache"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() { # expect RC PATTERN -- command...
    local want=$1 pat=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq "$want" ] || fail "$* exited $rc, expected $want: $(tail -2 "$tmp/err")"
    grep -q -- "$pat" "$tmp/err" "$tmp/out" || fail "$*: no '$pat' in: $(tail -2 "$tmp/err")"
}
T=$SRC/tests/data/cluster/sqadd
SAME="$SRC/tests/cli/same_documents.py"

# ---- usage --------------------------------------------------------------------------------------
expect 2 "--judge takes gate or stand-in" -- "$K" --judge guess gate "$T" "$T/expert.cu"
expect 2 "--gpus takes all or a list" -- "$K" --gpus 0,,1 gate "$T" "$T/expert.cu"
expect 2 "--executor takes local or slurm" -- "$K" --executor pbs gate "$T" "$T/expert.cu"
expect 2 "need --executor slurm" -- "$K" --slurm-partition gpu gate "$T" "$T/expert.cu"
expect 2 "the cluster chooses them" -- "$K" --executor slurm --gpus 0 gate "$T" "$T/expert.cu"
# Slurm's commands missing: a clear message, before anything is judged
expect 1 "sbatch is not on PATH" -- env PATH=/nonexistent "$K" --judge stand-in --executor slurm \
    --spool "$tmp/spool" --db "$tmp/nos.db" gate "$T" "$T/expert.cu"

# ---- the stand-in judge: marked on every line, never a measurement --------------------------------
expect 0 "^\[stand-in\] PASS .*expert.cu on task sqadd" -- "$K" --judge stand-in --db "$tmp/s.db" gate "$T" "$T/expert.cu"
grep -v -q '^\[stand-in\] ' "$tmp/out" && fail "a line of the stand-in's output is not marked: $(grep -v '^\[stand-in\] ' "$tmp/out" | head -1)"
"$K" --judge stand-in --db "$tmp/s.db" --json gate "$T" "$T/expert.cu" >"$tmp/v.json" 2>"$tmp/err" ||
    fail "stand-in gate --json: $(tail -2 "$tmp/err")"
python3 - "$tmp/v.json" <<'EOF' || fail "the stand-in's verdict is not marked as such"
import json, sys
v = json.load(open(sys.argv[1]))
assert v["stand_in"] is True and v["device"]["name"] == "stand-in", v.get("device")
assert "not a measurement" in v["toolchain"]["text"], v["toolchain"]
assert v["pass"] and v["stages"]["profile"]["speedup"] > 1.0  # the tuned kernel beats the naive one
EOF
# a script that records (a dry run of a GPU session): judged by the stand-in, the archive untouched
echo '{"kind": "gpu", "key": "x", "json": {}}' >"$tmp/a.jsonl"
cp "$tmp/a.jsonl" "$tmp/a0.jsonl"
expect 0 "the stand-in judge measures nothing" -- "$K" --judge stand-in --measure record --db "$tmp/s.db" \
    gate "$T" "$T/expert.cu" --archive "$tmp/a.jsonl"
cmp -s "$tmp/a.jsonl" "$tmp/a0.jsonl" || fail "the stand-in changed the archive"
grep -q '^\[stand-in\] PASS' "$tmp/out" || fail "a recording stand-in run is not marked: $(head -1 "$tmp/out")"
expect 1 "holds the stand-in judge's verdicts" -- "$K" --measure replay --db "$tmp/s.db" \
    gate "$T" "$T/expert.cu" --archive /dev/null
# its own store by default, never klineage.db
(cd "$tmp" && "$K" --judge stand-in gate "$T" "$T/naive.cu" >/dev/null 2>&1) || fail "stand-in with the default store"
[ -e "$tmp/klineage-stand-in.db" ] || fail "the stand-in did not use klineage-stand-in.db"
[ -e "$tmp/klineage.db" ] && fail "the stand-in wrote klineage.db"
# a text that does not parse fails at compile; one marked wrong at correct
printf '__global__ void k(float *a { a[0] = 1; }\n' >"$tmp/broken.cu"
expect 1 "does not parse" -- "$K" --judge stand-in --db "$tmp/s.db" gate "$T" "$tmp/broken.cu"
{ cat "$T/expert.cu"; echo "// klineage-stand-in: wrong"; } >"$tmp/wrong.cu"
expect 1 "REJECTED .* at correct" -- "$K" --judge stand-in --db "$tmp/s.db" gate "$T" "$tmp/wrong.cu"

# ---- a walk and an optimization: in process and on a pool of three slots, the same ------------------
# (the optimizations start from one library: cards carry the date they were measured)
for how in here pool; do
    opt=()
    [ $how = pool ] && opt=(--gpus 0,1,2)
    "$K" --judge stand-in "${opt[@]}" --db "$tmp/$how.db" --json lineage "$T" --probes 1 >"$tmp/walk-$how.json" \
        2>"$tmp/walk-$how.err" || fail "walk ($how): $(tail -2 "$tmp/walk-$how.err")"
    [ $how = here ] && cp "$tmp/here.db" "$tmp/lib.db"
    [ $how = pool ] && cp "$tmp/lib.db" "$tmp/pool.db"
    "$K" --judge stand-in "${opt[@]}" --db "$tmp/$how.db" --json optimize "$T" --budget 8 >"$tmp/opt-$how.json" \
        2>"$tmp/opt-$how.err" || fail "optimize ($how): $(tail -2 "$tmp/opt-$how.err")"
done
python3 "$SAME" "$tmp/walk-here.json" "$tmp/walk-pool.json" || fail "the walk on the pool differs from the walk in process"
python3 "$SAME" "$tmp/opt-here.json" "$tmp/opt-pool.json" || fail "the optimization on the pool differs"
python3 - "$tmp/walk-pool.json" <<'EOF' || fail "the walk took no step"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["steps"]) >= 2, len(d["steps"])
EOF

# bench --optimize: one policy's runs on two tasks at once over the pool, the same evaluation
for how in here pool; do
    opt=()
    [ $how = pool ] && opt=(--gpus 0,1)
    "$K" --judge stand-in "${opt[@]}" --db "$tmp/bench-$how.db" --json bench --optimize --tasks "$T" \
        "$SRC/tests/gpu/tasks/vadd" --budget 4 --policies blind,memory >"$tmp/bench-$how.json" 2>"$tmp/err" ||
        fail "bench --optimize ($how): $(tail -2 "$tmp/err")"
done
python3 "$SAME" "$tmp/bench-here.json" "$tmp/bench-pool.json" || fail "bench --optimize on the pool differs"

# ---- a gate batch on the pool: input order, a sick GPU dropped, bad candidates rejected -------------
files=()
for i in 1 2 3 4 5; do # every judgement that lands on GPU 1 kills its worker there
    { cat "$T/expert.cu"; echo "// variant $i"; echo "// klineage-stand-in: crash-on=1"; } >"$tmp/v$i.cu"
    files+=("$tmp/v$i.cu")
done
{ cat "$T/expert.cu"; echo "// klineage-stand-in: crash"; } >"$tmp/crash.cu"
{ cat "$T/expert.cu"; echo "// klineage-stand-in: hang"; } >"$tmp/hang.cu"
# GPU 1 listed first: it is every judgement's first choice while it is free
"$K" --judge stand-in --gpus 1,0 --db "$tmp/g.db" --json gate "$T" "${files[@]}" "$tmp/crash.cu" \
    >"$tmp/batch.json" 2>"$tmp/batch.err"
rc=$?
[ $rc -eq 1 ] || fail "the batch with a bad candidate exited $rc, expected 1: $(tail -2 "$tmp/batch.err")"
# a worker that hangs: killed at the time limit, and the candidate rejected for it
"$K" --judge stand-in --gpus 0 --db "$tmp/g.db" --json gate "$T" "$tmp/hang.cu" --timeout 5 >"$tmp/hang.json" \
    2>>"$tmp/batch.err" && fail "a candidate that hangs its worker passed"
python3 - "$tmp/hang.json" <<'EOF' || fail "the hanging candidate is not rejected for it"
import json, sys
v = json.load(open(sys.argv[1]))
assert not v["pass"] and "timed out after 5 s" in v["reason"], v.get("reason")
EOF
grep -q "GPU 1 (stand-in-1, stand-in) dropped from the pool" "$tmp/batch.err" ||
    fail "the failing GPU was not dropped: $(tail -3 "$tmp/batch.err")"
"$K" --judge stand-in --db "$tmp/g1.db" --json gate "$T" "${files[@]}" >"$tmp/one.json" 2>"$tmp/one.err" ||
    fail "the same files without the pool: $(tail -2 "$tmp/one.err")"
python3 - "$tmp/batch.json" "$tmp/one.json" <<'EOF' || fail "the pool's batch verdicts are wrong"
import json, sys
pool = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
one = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
names = [v["candidate"]["name"].rsplit("/", 1)[-1] for v in pool]
assert names == ["v1.cu", "v2.cu", "v3.cu", "v4.cu", "v5.cu", "crash.cu"], names  # input order
for p, o in zip(pool, one):  # the retried ones pass, with the figures the stand-in gives in process
    assert p["pass"] and p["key"] == o["key"], (p["candidate"], p.get("reason"))
    assert p["stages"]["profile"]["speedup"] == o["stages"]["profile"]["speedup"]
    where = p["run"]["placement"]
    assert where["executor"] == "local" and where["gpu"]["uuid"] in ("stand-in-0", "stand-in-1"), where
retried = [p for p in pool[:5] if p["run"]["placement"]["attempts"] == 2]
assert retried and all(p["run"]["placement"]["gpu"]["index"] == 0 for p in retried), retried
assert not pool[5]["pass"] and "SIGKILL" in pool[5]["reason"], pool[5].get("reason")
EOF

if [ $fails -gt 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "test_cluster: all passed"
