#!/bin/bash
# klineage rewrite: list, apply, remove, and the exit codes (docs/cli/rewrite.md).
set -u
K="$KLINEAGE"
D="$KL_SOURCE_DIR/tests/data/rules"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# --list finds both directions, with features; --json is an array
out=$("$K" rewrite "$D/unroll/fixed_trip.before.cu" --list) || fail "--list exit $?"
echo "$out" | grep -q "applicable unroll@conv1d:9" || fail "no unroll site: $out"
echo "$out" | grep -q '"trip":8' || fail "no trip count feature: $out"
"$K" rewrite "$D/launch-bounds/two_args.before.cu" --list --json | grep -q '"direction": "present"' || fail "--json"
"$K" rewrite "$D/unroll/fixed_trip.before.cu" --list --transform fast-math | grep -q "no sites" || fail "--transform"

# refusals are listed after the sites that rewrite, each with the reason --apply gives
out=$("$K" rewrite "$D/malformed/lambda_file_scope.cu" --list) || fail "--list of a lambda launch: exit $?"
echo "$out" | grep -q "^refused (found, but the transform does not rewrite them):" || fail "no refused section: $out"
why=$(echo "$out" | sed -n 's/^no apply   block-size@scale:10  line 10  //p')
[ -n "$why" ] || fail "block-size@scale:10 is not refused: $out"
"$K" rewrite "$D/malformed/lambda_file_scope.cu" --apply block-size@scale:10 2> "$T/err"; rc=$?
[ $rc -eq 1 ] || fail "applying a refused site: exit $rc"
grep -qF "$why" "$T/err" || fail "--apply says '$(cat "$T/err")', --list said '$why'"

# the canonical form: printed with what changed; a site found there carries it in --json
"$K" rewrite "$D/idioms/gemm_macro_nt.cu" --canonical > "$T/c.cu" 2> "$T/err" || fail "--canonical: exit $?"
grep -q "sum += a\[(i) \* lda + (k)\] \* b\[(j) \* ldb + (k)\];" "$T/c.cu" || fail "--canonical: $(cat "$T/c.cu")"
grep -q "expanded A_AT, B_AT, C_AT" "$T/err" || fail "--canonical says: $(cat "$T/err")"
"$K" rewrite "$D/idioms/gemm_macro_nt.cu" --list --json --transform smem-tile | grep -q '"canonical":' ||
    fail "the smem-tile site of the macro GEMM is not marked canonical"
"$K" rewrite "$D/idioms/gemm_macro_nt.cu" --canonical --param x=1 2>/dev/null; [ $? -eq 2 ] || fail "--canonical --param"

# --apply prints the file; -o writes it; --remove takes it back out
"$K" -q rewrite "$D/unroll/fixed_trip.before.cu" --apply unroll@conv1d:9 --param factor=4 > "$T/a.cu" || fail "apply"
cmp -s "$T/a.cu" "$D/unroll/fixed_trip.after.cu" || fail "apply differs from the golden file"
"$K" -q rewrite "$T/a.cu" --remove unroll@conv1d:10 -o "$T/b.cu" || fail "remove"
cmp -s "$T/b.cu" "$D/unroll/fixed_trip.before.cu" || fail "remove did not give back the original"

# not applicable / unknown site: exit 1 with the reason
"$K" rewrite "$D/unroll/fixed_trip.before.cu" --remove unroll@conv1d:9 2> "$T/err"; rc=$?
[ $rc -eq 1 ] || fail "remove at an applicable site: exit $rc"
grep -q "not applicable" "$T/err" || fail "no reason: $(cat "$T/err")"
"$K" rewrite "$D/unroll/fixed_trip.before.cu" --apply unroll@conv1d:99 2> "$T/err"; rc=$?
[ $rc -eq 1 ] || fail "unknown site: exit $rc"
grep -q "conv1d:9" "$T/err" || fail "the error does not list the sites: $(cat "$T/err")"
"$K" rewrite "$T/missing.cu" --list 2>/dev/null; [ $? -eq 1 ] || fail "missing file"

# usage errors: exit 2
"$K" rewrite "$D/unroll/fixed_trip.before.cu" 2>/dev/null; [ $? -eq 2 ] || fail "no action"
"$K" rewrite "$D/unroll/fixed_trip.before.cu" --apply unroll 2>/dev/null; [ $? -eq 2 ] || fail "no @SITE"
"$K" rewrite "$D/unroll/fixed_trip.before.cu" --apply unroll@conv1d:9 --param factor=3 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "bad parameter value: exit $rc"
"$K" rewrite "$D/unroll/fixed_trip.before.cu" --list --bogus 2>/dev/null; [ $? -eq 2 ] || fail "unknown option"

# every built-in naive kernel is where the backward walk ends: the catalog recognizes no
# optimization in it (a block size other than the catalog's simplest counts as one)
for n in "$KL_SOURCE_DIR"/tasks/*/naive.cu; do
    "$K" -q rewrite "$n" --list --json --task "$(dirname "$n")" > "$T/n.json" || fail "$n: --list exit $?"
    ! grep -q '"direction": "present"' "$T/n.json" || fail "$n: the catalog recognizes an optimization: $(grep -B2 -A6 '"present"' "$T/n.json" | head -20)"
done

# --help is the doc page's help block
"$K" rewrite --help | grep -q "usage: klineage rewrite FILE.cu --list" || fail "--help"
echo ok
