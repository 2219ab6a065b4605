#!/bin/bash
# klineage task check: valid tasks pass, every fault of a broken one is printed, weak
# references and references that do not build are rejected, usage errors exit 2.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
DATA="$KL_SOURCE_DIR/tests/data/tasks"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-task-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache"
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run NAME EXPECTED_EXIT ARGS...: output in $TMP/NAME.out and $TMP/NAME.err
run() {
    local name=$1 want=$2
    shift 2
    "$KLINEAGE" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    local got=$?
    if [ "$got" != "$want" ]; then
        fail "$name: exit $got, expected $want"
        sed 's/^/    /' "$TMP/$name.out" "$TMP/$name.err" >&2
    fi
}
expect() { # expect NAME STREAM TEXT
    grep -qF -- "$3" "$TMP/$1.$2" || fail "$1: $2 lacks: $3"
}

# Measurements by the one rule (docs/cli/klineage.md): without a GPU and without --measure,
# task check replays the kernels' recorded verdicts; here from an archive of our own.
gpu=0
if [ -d /proc/driver/nvidia/gpus ] || [ -e /dev/nvidia0 ]; then gpu=1; fi
export KLINEAGE_DB="$TMP/store.db"
export KLINEAGE_ARCHIVE="$TMP/archive.jsonl"
device="Replay Test GPU"
gpu_doc="{\"format\":\"klineage-gpu-1\",\"key\":\"$device\",\"date\":\"2026-11-29T00:00:00Z\",\"device\":{\"name\":\"$device\",\"cc\":\"9.0\"},\"ceilings\":{},\"toolchain\":{\"nvcc\":\"13.0.88\",\"arch\":\"sm_90\",\"text\":\"nvcc 13.0.88 sm_90\"}}"
printf '{"kind":"gpu","key":"%s","doc":%s}\n' "$device" "$gpu_doc" >"$KLINEAGE_ARCHIVE"

# a valid task, twice (the second from the reference cache): valid, but its kernels have no
# recorded verdict, so the check is not complete (exit 1, "unmeasured")
for i in 1 2; do
    run vadd 1 --measure replay task check "$DATA/vadd"
    expect vadd out "$DATA/vadd: valid"
    expect vadd out "reference: ok"
    expect vadd out "kernels: replayed from the archive"
    expect vadd out "[replay] naive $DATA/vadd/naive.cu: unmeasured"
    expect vadd out "[replay] expert $DATA/vadd/expert.cu: unmeasured"
done
if [ "$gpu" = 0 ]; then
    # no --measure and no GPU: replay, said once
    run vadd_auto 1 task check "$DATA/vadd"
    expect vadd_auto err "no GPU on this machine: replaying recorded measurements"
    # --measure live and record without a GPU are errors; record leaves the archive alone
    cp "$KLINEAGE_ARCHIVE" "$TMP/archive.before"
    run vadd_live 1 --measure live task check "$DATA/vadd"
    expect vadd_live err "--measure live measures now"
    run vadd_record 1 --measure record task check "$DATA/vadd"
    expect vadd_record err "the archive is unchanged"
    cmp -s "$KLINEAGE_ARCHIVE" "$TMP/archive.before" || fail "vadd_record: the archive was rewritten"
    grep -q "recorded to" "$TMP/vadd_record.err" && fail "vadd_record: claims it recorded"
fi
# record a verdict for each kernel under the key the miss named: the check passes, replayed
for role in naive expert; do
    key=$(grep -o "$role .*key [0-9a-f]\{64\}" "$TMP/vadd.out" | grep -o '[0-9a-f]\{64\}' | tail -1)
    [ ${#key} -eq 64 ] || fail "no verdict key for $role in: $(cat "$TMP/vadd.out")"
    printf '{"kind":"verdict","key":"%s","doc":{"format":"klineage-verdict-1","key":"%s","date":"2026-11-29T01:02:03Z","pass":true,"failed_stage":null,"reason":null,"candidate":{"name":"/elsewhere/%s.cu"},"baseline":{"name":"naive.cu"},"device":{"name":"%s"},"toolchain":{"nvcc":"13.0.88","arch":"sm_90","text":"nvcc 13.0.88 sm_90"},"stages":{"compile":{"ok":true,"kernels":[]},"correct":{"ok":true,"trials":[]},"determinism":{"ok":true},"integrity":{"ok":true},"stream":{"ok":true},"profile":{"ok":true,"candidate":{"median_ms":0.5},"speedup":1.0},"sanitize":{"skipped":"not asked for"}}}}\n' \
        "$key" "$key" "$role" "$device" >>"$KLINEAGE_ARCHIVE"
done
run vadd_hit 0 --measure replay task check "$DATA/vadd"
expect vadd_hit out "[replay] naive $DATA/vadd/naive.cu: passes the gate"
expect vadd_hit out "[replay] expert $DATA/vadd/expert.cu: passes the gate"
# --json: the kernels' verdicts are in the document, never silently left out
run json_hit 0 --measure replay --json task check "$DATA/vadd"
expect json_hit out '"role": "naive"'
expect json_hit out '"result": "pass"'
expect json_hit out '"replayed": true'
expect json_hit out '"measure": "replay"'
run gather 1 --measure replay task check "$DATA/gather"
expect gather out "$DATA/gather: valid"

# a task whose cost says the reference would take far past the gate's budget at the bench
# shape: task check warns, naming the shape and what the gate does instead
mkdir -p "$TMP/slowref"
cp "$DATA/vadd/"* "$TMP/slowref/"
sed 's/"flops": "n"/"flops": "n*n"/' "$DATA/vadd/task.json" >"$TMP/slowref/task.json"
run slowref 1 --measure replay task check "$TMP/slowref"
expect slowref err "warning: $TMP/slowref/task.json: shapes.bench: the float64 reference would take about"
expect slowref err "the gate checks this shape against the naive kernel's outputs"
grep -q "shapes.check\[0\]" "$TMP/slowref.err" && fail "slowref: warned about a small shape"
run slowref_json 1 --measure replay --json task check "$TMP/slowref"
expect slowref_json out '"reference_time"'
expect slowref_json out '"flops_per_s"'

# every fault of the broken task, each with its file and key
run broken 1 task check "$DATA/broken"
J="$DATA/broken/task.json"
for key in "colour: unknown key" "sizes[1]: duplicate size name" "shapes.check[0].n: sizes must be positive" \
    "shapes.check[1].m: \"m\" is not a size" "shapes.check[1]: missing a value for size \"n\"" \
    "shapes.check[2].n: expected a positive integer" "args[0].shape: \"n*(\": column 4" \
    "args[1].shape: \"n*n*n*n*n\" at bench: column 4: multiplication overflows int64" \
    "args[1].init.hi: \"k\"" "args[2].name: duplicate argument name \"a\"" "args[2].role: unknown role \"output\"" \
    "tolerance.rel_l2: expected a number" "expert: $DATA/broken/missing.cu does not exist"; do
    expect broken err "error: $J: $key"
done
n=$(grep -c '^error: ' "$TMP/broken.err")
[ "$n" -ge 13 ] || fail "broken: $n faults printed, expected at least 13"
expect broken err "invalid ($n faults)"
[ -s "$TMP/broken.out" ] && fail "broken: printed on stdout"

# launch() signatures, at the parameter's line and column
run badsig 1 task check "$DATA/badsig"
expect badsig err "error: $DATA/badsig/naive.cu:3:40: args[1]: launch() parameter 2 is 'float*', expected const float*"
expect badsig err "error: $DATA/badsig/naive.cu:3:50: args[2]: launch() parameter 3 is 'double*'"
expect badsig err "$DATA/badsig/expert.cu:3:1: expert: launch() must have C linkage"
expect badsig err "expert: launch() takes 4 parameters, expected 5"

# a weak reference
run weak 1 task check "$DATA/weak_ref"
expect weak err "error: $DATA/weak_ref/reference.c: c: weak reference: output c does not change when the inputs change"

# a reference that does not build: the compiler's file:line
mkdir -p "$TMP/noref"
cp "$DATA/vadd/task.json" "$DATA/vadd/naive.cu" "$DATA/vadd/expert.cu" "$TMP/noref/"
printf 'void reference(const double *a, const double *b, double *c, int n)\n{\n    c[0] = a[0] + b[0]\n}\n' \
    >"$TMP/noref/reference.c"
run noref 1 task check "$TMP/noref"
expect noref err "$TMP/noref/reference.c:3:"
expect noref err "the reference does not build"
rm "$TMP/noref/reference.c"
run noref2 1 task check "$TMP/noref"
expect noref2 err "reference: $TMP/noref/reference.c does not exist"

# --json: one object on stdout
run json 1 task check "$DATA/badsig" --json
expect json out '"valid": false'
expect json out '"key": "args[1]"'
expect json out '"line": 3'
run json_ok 0 --measure replay --json task check "$DATA/vadd"
expect json_ok out '"valid": true'
expect json_ok out '"reference": "ok"'
# --quiet: nothing but faults
run quiet 0 --measure replay --quiet task check "$DATA/vadd"
[ -s "$TMP/quiet.out" ] || [ -s "$TMP/quiet.err" ] && fail "quiet: printed something for a valid task"

# usage errors
run usage1 2 task
run usage2 2 task check
run usage3 2 task frobnicate "$DATA/vadd"
run usage4 2 task check "$DATA/vadd" "$DATA/gather"
run usage5 2 task check --frob "$DATA/vadd"
expect usage5 err "unknown option '--frob'"

# --help is the block of docs/cli/task.md
run help 0 task check --help
sed -n '/^<!-- help -->/,/^<!-- \/help -->/p' "$KL_SOURCE_DIR/docs/cli/task.md" | grep -v '^<!--' | grep -v '^```' \
    >"$TMP/help.want"
diff -u "$TMP/help.want" "$TMP/help.out" >&2 || fail "help: --help differs from docs/cli/task.md"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok"
