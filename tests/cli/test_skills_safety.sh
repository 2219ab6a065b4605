#!/bin/bash
# klineage skills, against awkward ids: ids that differ only in case or punctuation are refused
# on import (the library stays exportable); `skills delete` removes a card and its parts; an id
# that starts with '-' is refused; export never writes outside its folder (odd ids, a planted
# symbolic link); `parse` refuses a FIFO without blocking.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
DATA="$KL_SOURCE_DIR/tests/data/skills"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-skills-safety-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache"
DB="$TMP/k.db"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
run() {
    local name=$1 want=$2
    shift 2
    timeout 60 "$KLINEAGE" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    local got=$?
    if [ "$got" != "$want" ]; then
        fail "$name: exit $got, expected $want"
        sed 's/^/    /' "$TMP/$name.out" "$TMP/$name.err" >&2
    fi
}
expect() { grep -qF -- "$3" "$TMP/$1.$2" || fail "$1: $2 lacks: $3"; }

# card ID [ID…] > FILE: the unroll card under other ids (an array when several)
card() {
    python3 - "$DATA/unroll.json" "$@" <<'EOF'
import json, sys
base = json.load(open(sys.argv[1]))
cards = []
for i in sys.argv[2:]:
    c = dict(base)
    c["id"] = i
    cards.append(c)
print(json.dumps(cards[0] if len(cards) == 1 else cards))
EOF
}

# ---- ids that differ only in case or punctuation
card Vec-4 >"$TMP/a.json"
card vec_4 >"$TMP/b.json"
run import-a 0 --db "$DB" skills import "$TMP/a.json"
run import-b 1 --db "$DB" skills import "$TMP/b.json"
expect import-b err 'skill "vec_4" differs from the stored skill "Vec-4" only in case or punctuation'
expect import-b err "klineage skills delete Vec-4"
card Unroll-X unroll-x >"$TMP/two.json"
run import-two 1 --db "$DB" skills import "$TMP/two.json"
expect import-two err '[1] skill "unroll-x" differs from "Unroll-X" ([0])'
run list1 0 --db "$DB" skills list --json
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$TMP/list1.out")" = 1 ] ||
    fail "list1: a refused import stored something"
# the same id again merges, as before
run import-a2 0 --db "$DB" skills import "$TMP/a.json"
run export-agent 0 --db "$DB" skills export --format agent-skills -o "$TMP/agent"
[ -f "$TMP/agent/vec-4/SKILL.md" ] || fail "export-agent: no vec-4/SKILL.md"

# ---- delete: the card and its parts; then the other spelling imports
run delete-missing 1 --db "$DB" skills delete nope
expect delete-missing err 'no skill with the id "nope"'
run delete-prefix 1 --db "$DB" skills delete Vec
run delete-usage 2 --db "$DB" skills delete
run delete 0 --db "$DB" skills delete Vec-4
expect delete err "deleted skill Vec-4 (and the 1 part it was merged from)"
run show-deleted 1 --db "$DB" skills show Vec-4
run import-b2 0 --db "$DB" skills import "$TMP/b.json"
run show-b 0 --db "$DB" skills show vec_4

# ---- an id that reads as an option
card --- >"$TMP/dash.json"
run import-dash 1 --db "$DB" skills import "$TMP/dash.json"
expect import-dash err "starts with '-': it would read as an option"
run show-dashdash 1 --db "$DB" skills show -- ---
expect show-dashdash err 'no skill "---"'

# ---- export stays inside its folder, whatever the ids say
card 'x..y' 'A%2e%2e' 'ü..' 'nul~' >"$TMP/odd.json"
DB2="$TMP/odd.db"
run import-odd 0 --db "$DB2" skills import "$TMP/odd.json"
mkdir -p "$TMP/out/agent" "$TMP/elsewhere"
run export-odd 0 --db "$DB2" skills export --format agent-skills -o "$TMP/out/agent"
outside=$(find "$TMP" -name SKILL.md -not -path "$TMP/out/agent/*" -not -path "$TMP/agent/*")
[ -z "$outside" ] || fail "export-odd: wrote outside its folder: $outside"
for d in "$TMP/out/agent"/*; do
    case $(basename "$d") in *[!a-z0-9-]*) fail "export-odd: folder name $(basename "$d")" ;; esac
done
# a symbolic link planted where a card's folder goes is not followed
rm -rf "$TMP/out/agent"
mkdir -p "$TMP/out/agent"
ln -s "$TMP/elsewhere" "$TMP/out/agent/x-y"
run export-link 1 --db "$DB2" skills export --format agent-skills -o "$TMP/out/agent"
expect export-link err "is not a folder (a symbolic link?)"
[ -z "$(ls -A "$TMP/elsewhere")" ] || fail "export-link: wrote through the link"

# ---- parse refuses a FIFO at once (it used to wait for a writer forever)
mkfifo "$TMP/fifo.cu"
run fifo 1 parse "$TMP/fifo.cu"
expect fifo err "is a FIFO, expected a regular file"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok"
