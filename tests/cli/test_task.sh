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

# a valid task, twice (the second from the reference cache)
for i in 1 2; do
    run vadd 0 task check "$DATA/vadd"
    expect vadd out "$DATA/vadd: valid"
    expect vadd out "reference: ok"
    expect vadd out "kernels: not gated"
done
run gather 0 task check "$DATA/gather"

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
run json_ok 0 --json task check "$DATA/vadd"
expect json_ok out '"valid": true'
expect json_ok out '"reference": "ok"'
# --quiet: nothing but faults
run quiet 0 --quiet task check "$DATA/vadd"
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
