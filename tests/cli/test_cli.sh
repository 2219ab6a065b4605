#!/bin/bash
# The command line as a whole: --version, help, exit codes and hints for unknown
# subcommands and options, and for every listed subcommand: `SUB --help` is `help SUB`,
# and is exactly the help block of docs/cli/SUB.md.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
DOCS="$KL_SOURCE_DIR/docs/cli"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-cli-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
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
        head -c 2000 "$TMP/$name.out" "$TMP/$name.err" | sed 's/^/    /' >&2
    fi
}
expect() { # expect NAME STREAM TEXT
    grep -qF -- "$3" "$TMP/$1.$2" || fail "$1: $2 lacks: $3"
}
# one_line_hint NAME: stderr is an "error: …" line and a "hint: …" line, nothing else
one_line_hint() {
    local n
    n=$(wc -l <"$TMP/$1.err")
    [ "$n" = 2 ] || fail "$1: stderr has $n lines, expected an error and a one-line hint"
    head -1 "$TMP/$1.err" | grep -q '^error: ' || fail "$1: the first stderr line is not 'error: …'"
    tail -1 "$TMP/$1.err" | grep -q '^hint: ' || fail "$1: the last stderr line is not 'hint: …'"
    [ -s "$TMP/$1.out" ] && fail "$1: stdout is not empty"
}
# help_block PAGE: the lines between <!-- help --> and <!-- /help -->, code fences dropped
help_block() {
    awk '/^<!-- \/help -->/ { inside = 0 } inside && !/^```/ { print } /^<!-- help -->/ { inside = 1 }' "$1"
}

# the version, both ways, is the one in the public header
version=$(sed -n 's/^#define KL_VERSION_STRING "\(.*\)"$/\1/p' "$KL_SOURCE_DIR/include/klineage/klineage.h")
[ -n "$version" ] || fail "no KL_VERSION_STRING in include/klineage/klineage.h"
run version1 0 --version
[ "$(cat "$TMP/version1.out")" = "klineage $version" ] || fail "--version: '$(cat "$TMP/version1.out")'"
run version2 0 version
cmp -s "$TMP/version1.out" "$TMP/version2.out" || fail "'version' differs from '--version'"
run version3 2 version extra
one_line_hint version3

# the overview, and its list of subcommands
run overview 0 help
expect overview out "usage: klineage"
expect overview out "subcommands:"
run overview2 0 --help
cmp -s "$TMP/overview.out" "$TMP/overview2.out" || fail "--help differs from help"
help_block "$DOCS/klineage.md" >"$TMP/klineage.doc"
head -n "$(wc -l <"$TMP/klineage.doc")" "$TMP/overview.out" | cmp -s - "$TMP/klineage.doc" ||
    fail "the overview does not start with the help block of docs/cli/klineage.md"
run none 2
expect none err "usage: klineage"
subs=$(awk '/^subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' "$TMP/overview.out")
[ -n "$subs" ] || fail "help lists no subcommands"

# unknown subcommands and options: exit 2, one line of error, one of hint
run unknown 2 frobnicate
one_line_hint unknown
expect unknown err "'frobnicate' is not a klineage subcommand"
run unknownopt 2 --frobnicate
one_line_hint unknownopt
run helpunknown 2 help frobnicate
one_line_hint helpunknown
run badglobal 2 --measure sideways version
one_line_hint badglobal
run nojobs 2 --jobs
one_line_hint nojobs

# every listed subcommand: a doc page whose help block is exactly `SUB --help` = `help SUB`
n=0
for sub in $subs; do
    n=$((n + 1))
    page="$DOCS/$sub.md"
    if [ ! -f "$page" ]; then
        fail "$sub: listed, but docs/cli/$sub.md does not exist"
        continue
    fi
    run "h1_$sub" 0 "$sub" --help
    run "h2_$sub" 0 help "$sub"
    cmp -s "$TMP/h1_$sub.out" "$TMP/h2_$sub.out" || fail "$sub: '$sub --help' differs from 'help $sub'"
    [ -s "$TMP/h1_$sub.out" ] || fail "$sub: --help printed nothing"
    help_block "$page" >"$TMP/$sub.doc"
    if ! cmp -s "$TMP/h1_$sub.out" "$TMP/$sub.doc"; then
        fail "$sub: --help is not the help block of docs/cli/$sub.md:"
        diff "$TMP/$sub.doc" "$TMP/h1_$sub.out" | head -20 >&2
    fi
    grep -q "^usage: klineage $sub" "$TMP/h1_$sub.out" || fail "$sub: --help does not start with 'usage: klineage $sub'"
    # -h is --help too
    run "h3_$sub" 0 "$sub" -h
    cmp -s "$TMP/h1_$sub.out" "$TMP/h3_$sub.out" || fail "$sub: '-h' differs from '--help'"
done
[ "$n" -ge 3 ] || fail "only $n subcommands listed"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok ($n subcommands)"
