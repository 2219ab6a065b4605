#!/bin/bash
# Crash safety of a resumable command: kill -9 it at KILLS random points, resume each, and check
# the store's integrity and that the result equals an uninterrupted run's.
#
#   tests/crash_resume.sh KILLS RUN RESULT
#
# RUN and RESULT are shell commands run with $DB set to the store's path (bash -c). RUN is one
# command (it is exec'd, so the kill reaches it and nothing else: its children go because it
# went, as after a real crash); run again on the same store it must take up what the store holds
# and exit 0 once the work is done. RESULT prints the result on stdout, without what may differ
# between runs (time stamps), for comparison.
#
# First RUN once without a kill on a fresh store (the reference, and its duration T); then, KILLS
# times: a fresh store, RUN killed with SIGKILL after a random delay in (0, T), the store checked
# (SQLite's integrity_check, every document valid JSON), RUN again to completion, RESULT compared.
# Environment: KL_CRASH_SEED (default 1), KL_CRASH_DIR (a folder to work in; default: a new one,
# removed at the end), KL_CRASH_BUDGET_S (stop starting kills after this many seconds, once three
# are done; default: none). Needs python3 (its sqlite3 module reads the store). Exit 0 when every
# resume gave the reference's result; prints one line per kill.
#
# A second case is a few lines: e.g. an optimization stored step by step,
#   tests/crash_resume.sh 50 'klineage --db "$DB" --measure replay optimize tasks/T …' \
#       'klineage --db "$DB" --measure replay --json optimize tasks/T … | python3 -c "…drop time stamps…"'
set -u
if [ $# -ne 3 ]; then
    sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
kills=$1
run_cmd=$2
result_cmd=$3
RANDOM=${KL_CRASH_SEED:-1}
if [ -n "${KL_CRASH_DIR:-}" ]; then
    work=$KL_CRASH_DIR
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/klineage-crash-XXXXXX")
fi

fresh_store() { rm -f "$1" "$1-wal" "$1-shm" "$1-journal"; }

# check_store DB: integrity_check says ok, and every document is JSON; sets `why` to what is wrong,
# returns 1 then. Checked on a copy (the store with its -wal/-journal files), opened read-write as
# the resumed run opens it: a kill in the first moments can leave a hot journal or a WAL without
# its index, which SQLite recovers on a writable open and refuses on a read-only one ("attempt to
# write a readonly database"); the copy keeps the store itself as the kill left it for the resume.
# One python3 process does every check of the run (a coprocess reading one path per line and
# answering "ok" or "bad WHY" on one line): starting python3 costs more than a check.
checker='
import json, os, shutil, sqlite3, sys, tempfile
def check(path):
    tmp = tempfile.mkdtemp(prefix="klineage-check-")
    copy = os.path.join(tmp, "store.db")
    for ext in ("", "-wal", "-journal"):
        if os.path.exists(path + ext):
            shutil.copyfile(path + ext, copy + ext)
    try:
        db = sqlite3.connect(copy)
    except Exception as e:
        return "cannot open the store: %s" % e
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type=\x27table\x27")]
    except sqlite3.DatabaseError as e:
        return "not a database: %s" % e
    ok = db.execute("PRAGMA integrity_check").fetchall()
    if ok != [("ok",)]:
        return "integrity_check: %s" % ok[:5]
    if "documents" in tables:
        for kind, key, text in db.execute("SELECT kind, key, json FROM documents"):
            try:
                json.loads(text)
            except Exception as e:
                return "%s/%s is not JSON: %s" % (kind, key, e)
    db.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return None
for line in sys.stdin:
    try:
        why = check(line.rstrip("\n"))
    except Exception as e:
        why = "the check failed: %r" % e
    print("ok" if why is None else "bad " + " ".join(why.split()), flush=True)
'
coproc CHECKER { exec python3 -c "$checker"; }
checker_in=${CHECKER[1]} checker_out=${CHECKER[0]} checker_pid=$CHECKER_PID
cleanup() {
    exec {checker_in}>&- 2>/dev/null
    kill "$checker_pid" 2>/dev/null
    [ -n "${KL_CRASH_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
check_store() {
    local answer=
    printf '%s\n' "$1" >&"$checker_in" && IFS= read -r answer <&"$checker_out"
    case $answer in
    ok) why= && return 0 ;;
    "bad "*) why=${answer#bad } ;;
    *) why="the store checker (python3) stopped" ;;
    esac
    return 1
}

export DB="$work/reference.db"
fresh_store "$DB"
start=$(date +%s.%N)
if ! bash -c "exec $run_cmd" >"$work/reference.run" 2>&1; then
    echo "crash_resume: the uninterrupted run failed:" >&2
    tail -20 "$work/reference.run" >&2
    exit 1
fi
T=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
if ! bash -c "$result_cmd" >"$work/reference.out" 2>"$work/reference.err" || [ ! -s "$work/reference.out" ]; then
    echo "crash_resume: the reference's result could not be read:" >&2
    tail -20 "$work/reference.err" >&2
    exit 1
fi
echo "reference: ${T} s uninterrupted"

failures=0
mid=0
done_kills=0
t0=$(date +%s)
for i in $(seq "$kills"); do
    if [ -n "${KL_CRASH_BUDGET_S:-}" ] && [ "$done_kills" -ge 3 ] && [ $(($(date +%s) - t0)) -gt "$KL_CRASH_BUDGET_S" ]; then
        echo "the budget of $KL_CRASH_BUDGET_S s is spent: $done_kills of $kills kills done"
        break
    fi
    done_kills=$i
    export DB="$work/trial.db"
    fresh_store "$DB"
    # a delay in (0, T): 1/1000ths of T
    frac=$(( (RANDOM * 32768 + RANDOM) % 999 + 1 ))
    delay=$(awk -v t="$T" -v f="$frac" 'BEGIN { printf "%.3f", t * f / 1000 }')
    bash -c "exec $run_cmd" >"$work/trial.run" 2>&1 &
    pid=$!
    sleep "$delay"
    landed=finished
    if kill -KILL "$pid" 2>/dev/null; then landed=killed; fi
    wait "$pid" 2>/dev/null
    status=ok
    if [ -e "$DB" ] && ! check_store "$DB"; then
        status="store damaged after the kill: $why"
    elif ! bash -c "exec $run_cmd" >"$work/resume.run" 2>&1; then
        status="the resume failed: $(tail -3 "$work/resume.run" | tr '\n' ' ')"
    elif ! check_store "$DB"; then
        status="store damaged after the resume: $why"
    elif ! bash -c "$result_cmd" >"$work/trial.out" 2>"$work/trial.err"; then
        status="the result could not be read: $(tail -3 "$work/trial.err" | tr '\n' ' ')"
    elif ! cmp -s "$work/reference.out" "$work/trial.out"; then
        status="the result differs from the uninterrupted run's"
        diff "$work/reference.out" "$work/trial.out" | head -10 >&2
    fi
    [ "$landed" = killed ] && mid=$((mid + 1))
    printf 'kill %2d at %6.2f s (%s): %s\n' "$i" "$delay" "$landed" "$status"
    [ "$status" = ok ] || failures=$((failures + 1))
done
echo "$done_kills kills ($mid mid-run), $failures failure(s)"
[ "$failures" -eq 0 ]
