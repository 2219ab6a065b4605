#!/bin/bash
# klineage parse: the summary, exit codes, usage errors, JSON goldens and bad input.
#
#   test_parse.sh                  the general checks (summary, several files, usage, every
#                                  kernel file of the repository)
#   test_parse.sh golden NAME      `parse --json` of tests/data/cuda/NAME.cu (or of the files
#                                  listed in tests/data/golden/parse/NAME.args) against
#                                  tests/data/golden/parse/NAME.json
#   test_parse.sh bad CASE         one bad input, generated here: empty, binary_garbage,
#                                  text_garbage, ten_megabytes, unterminated_comment,
#                                  nested_braces, invalid_utf8, directory, missing_file
#
# Goldens: KL_UPDATE_GOLDEN=1 rewrites them instead of comparing; review the diff before
# committing (see docs/syntax.md, "Golden files").
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
CUDA="$KL_SOURCE_DIR/tests/data/cuda"
GOLDEN="$KL_SOURCE_DIR/tests/data/golden/parse"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-parse-XXXXXX")
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
expect_not() { # expect_not NAME STREAM TEXT
    if grep -qF -- "$3" "$TMP/$1.$2"; then fail "$1: $2 has: $3"; fi
}
# pos FILE TEXT: "LINE:COLUMN" of the first occurrence of TEXT in FILE (1-based, bytes)
pos() {
    awk -v t="$2" '{ i = index($0, t); if (i) { print NR ":" i; exit } }' "$1"
}
# valid_json FILE: when python3 is here, the file must be valid JSON
valid_json() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json, sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$1" 2>"$TMP/json.err" ||
            fail "$1 is not valid JSON: $(head -c 300 "$TMP/json.err")"
    fi
}
# valid_utf8 FILE
valid_utf8() {
    iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1 || fail "$1 is not valid UTF-8"
}

general() {
    # one file: the summary names the kernel, its parameters, the launch site, the features
    local f="$CUDA/vector_add.cu"
    run one 0 parse "$f"
    expect one out "$f: 1 kernel, 0 device functions, 1 host function, 1 launch site, 0 loops"
    expect one out "kernel vector_add $(pos "$f" '__global__ void vector_add')"
    expect one out "params: const float *a, const float *b, float *c, int n"
    expect one out "host function launch $(pos "$f" 'void launch') extern \"C\""
    expect one out "$(pos "$f" 'vector_add<<<') vector_add<<<grid, block, 0, stream>>>(a, b, c, n)"
    expect one out "features: params=4 pointer_params=3 const_pointer_params=2"
    [ -s "$TMP/one.err" ] && fail "one: stderr is not empty: $(head -c 300 "$TMP/one.err")"

    # loops with nesting and pragmas, shared memory with its dimensions
    f="$CUDA/matmul_tiled_2d.cu"
    run loops 0 parse "$f"
    expect loops out "for $(pos "$f" 'for (int t') (int t = 0; t < (K + TILE - 1) / TILE; ++t) depth 1"
    expect loops out "  for $(pos "$f" 'for (int k') (int k = 0; k < TILE; ++k) depth 2, #pragma unroll"
    expect loops out "float As[TILE][TILE + 1] $(pos "$f" '__shared__ float As')"
    expect loops out "uses: __syncthreads (barrier) x2"
    expect loops out "max_loop_depth=2"
    f="$CUDA/dynamic_smem.cu"
    run dyn 0 parse "$f"
    expect dyn out "extern unsigned char smem[] $(pos "$f" 'extern __shared__ __align__'), dynamic (sized at launch), aligned 16"
    expect dyn out "row_stats<<<rows, threads, smem, stream>>>(x, mean, cols)"
    f="$CUDA/template_reduce.cu"
    run tmpl 0 parse "$f"
    expect tmpl out "template <int BLOCK, typename T>"
    expect tmpl out "launch bounds: BLOCK"
    expect tmpl out "block_sum<256, float><<<120, 256, 0, stream>>>(in, out, n)"
    expect tmpl out "uses: warp_sum (device) x2, __syncthreads (barrier), atomicAdd (atomic)"
    f="$CUDA/preproc_conditionals.cu"
    run cond 0 parse "$f"
    expect cond out "kernel activate $(pos "$f" '__global__ void activate') #if defined(USE_FAST_MATH)"
    expect cond out "#if !(defined(USE_FAST_MATH))"

    # several files: one summary each, in order, exit 0
    run two 0 parse "$CUDA/vector_add.cu" "$CUDA/launch_bounds.cu"
    expect two out "$CUDA/vector_add.cu: 1 kernel"
    expect two out "$CUDA/launch_bounds.cu: 2 kernels"
    [ "$(grep -n "launch_bounds.cu: 2 kernels" "$TMP/two.out" | cut -d: -f1)" -gt \
      "$(grep -n "vector_add.cu: 1 kernel" "$TMP/two.out" | cut -d: -f1)" ] || fail "two: files out of order"

    # --json: an object for one file, an array for several; --json may come first (global)
    run json1 0 parse --json "$CUDA/vector_add.cu"
    valid_json "$TMP/json1.out"
    [ "$(head -c 1 "$TMP/json1.out")" = "{" ] || fail "json1: not an object"
    run json1g 0 --json parse "$CUDA/vector_add.cu"
    cmp -s "$TMP/json1.out" "$TMP/json1g.out" || fail "json1g: --json before the subcommand differs"
    run json2 0 parse "$CUDA/vector_add.cu" "$CUDA/launch_bounds.cu" --json
    valid_json "$TMP/json2.out"
    [ "$(head -c 1 "$TMP/json2.out")" = "[" ] || fail "json2: not an array"

    # a partial file: the model is printed, each error on stderr, exit 1
    printf '__global__ void k(float *x) {\n  x[0] = 1\n  x[1] = 2;\n}\n' >"$TMP/partial.cu"
    run partial 1 parse "$TMP/partial.cu"
    expect partial out "(partial: the file has syntax errors)"
    expect partial out "kernel k 1:1"
    grep -qE "^error: $TMP/partial.cu:[0-9]+:[0-9]+: (missing|unexpected) " "$TMP/partial.err" ||
        fail "partial: no 'error: FILE:LINE:COL: …' on stderr: $(cat "$TMP/partial.err")"
    run partialj 1 parse --json "$TMP/partial.cu"
    valid_json "$TMP/partialj.out"
    expect partialj out '"partial": true'

    # a good file and a missing one: the good one is still shown; exit 1; JSON keeps both
    run mixed 1 parse "$CUDA/vector_add.cu" "$TMP/nope.cu"
    expect mixed out "kernel vector_add"
    expect mixed err "error: $TMP/nope.cu: cannot open"
    run mixedj 1 parse --json "$CUDA/vector_add.cu" "$TMP/nope.cu"
    valid_json "$TMP/mixedj.out"
    expect mixedj out "\"file\": \"$TMP/nope.cu\""
    expect mixedj out '"status": "not found"'

    # usage: exit 2 with a one-line hint
    run noargs 2 parse
    expect noargs err "needs at least one FILE.cu"
    expect noargs err "hint: see 'klineage parse --help'"
    run badopt 2 parse --frobnicate "$CUDA/vector_add.cu"
    expect badopt err "unknown option '--frobnicate'"
    expect badopt err "hint:"
    # a file named like an option, after "--"
    cp "$CUDA/vector_add.cu" "$TMP/-dash.cu"
    (cd "$TMP" && "$KLINEAGE" parse -- -dash.cu >"$TMP/dash.out" 2>&1) || fail "dash: 'parse -- -dash.cu' failed"
    expect dash out "-dash.cu: 1 kernel"

    # help
    run help1 0 parse --help
    run help2 0 help parse
    cmp -s "$TMP/help1.out" "$TMP/help2.out" || fail "parse --help differs from help parse"
    expect help1 out "usage: klineage parse FILE.cu"

    # every kernel file of the repository parses completely (fixtures that are broken on
    # purpose are named broken*.cu): all in one run, which exits 0 only when every file parsed
    # whole (a sanitizer build starts in about 0.1 s of CPU, and there are 500 files); when it
    # does not, each file again on its own, to name the ones that fail
    local files=() file
    while IFS= read -r -d '' file; do
        files+=("$file")
    done < <(find "$KL_SOURCE_DIR/tasks" "$KL_SOURCE_DIR/tests/data" -name '*.cu' ! -name 'broken*' -print0 2>/dev/null)
    [ "${#files[@]}" -ge 15 ] || fail "repo: only ${#files[@]} .cu files found"
    if ! "$KLINEAGE" parse "${files[@]}" >"$TMP/repo.out" 2>"$TMP/repo.err"; then
        local bad=0
        for file in "${files[@]}"; do
            if ! "$KLINEAGE" parse "$file" >/dev/null 2>"$TMP/repo.err"; then
                fail "repo: $file: $(head -3 "$TMP/repo.err")"
                bad=$((bad + 1))
            fi
        done
        [ "$bad" -gt 0 ] || fail "repo: parsing the ${#files[@]} files together failed, each alone passed: $(head -3 "$TMP/repo.err")"
    fi
    # a summary for every file
    [ "$(grep -c '^[^ ].*: [0-9]* kernels\?, ' "$TMP/repo.out")" -eq "${#files[@]}" ] ||
        fail "repo: $(grep -c '^[^ ].*: [0-9]* kernels\?, ' "$TMP/repo.out") summaries for ${#files[@]} files"
}

golden() {
    local name=$1 args
    if [ -f "$GOLDEN/$name.args" ]; then
        read -r -a args <"$GOLDEN/$name.args"
    else
        args=("$name.cu")
    fi
    # relative names, so the documents do not depend on where the repository is
    (cd "$CUDA" && "$KLINEAGE" parse --json "${args[@]}") >"$TMP/golden.out" 2>"$TMP/golden.err"
    local rc=$?
    [ "$rc" = 0 ] || fail "golden $name: exit $rc: $(head -c 500 "$TMP/golden.err")"
    valid_json "$TMP/golden.out"
    if [ "${KL_UPDATE_GOLDEN:-0}" = 1 ]; then
        mkdir -p "$GOLDEN"
        cp "$TMP/golden.out" "$GOLDEN/$name.json"
        echo "updated $GOLDEN/$name.json"
        return
    fi
    [ -f "$GOLDEN/$name.json" ] || { fail "golden $name: $GOLDEN/$name.json is missing (KL_UPDATE_GOLDEN=1 makes it)"; return; }
    if ! diff -u "$GOLDEN/$name.json" "$TMP/golden.out" >"$TMP/golden.diff"; then
        fail "golden $name: output differs from $GOLDEN/$name.json (KL_UPDATE_GOLDEN=1 to accept):"
        head -60 "$TMP/golden.diff" >&2
    fi
}

bad() {
    local f="$TMP/input.cu"
    case "$1" in
    empty)
        : >"$f"
        run empty 0 parse "$f"
        expect empty out "$f: 0 kernels, 0 device functions, 0 host functions, 0 launch sites, 0 loops"
        run emptyj 0 parse --json "$f"
        valid_json "$TMP/emptyj.out"
        ;;
    binary_garbage)
        head -c 65536 "$KLINEAGE" >"$f" # an executable: NUL bytes from the start
        run garbage 1 parse "$f"
        expect garbage err "error: $f:"
        expect garbage err "a NUL byte: this is not a text file"
        [ -s "$TMP/garbage.out" ] && fail "garbage: a summary was printed for a binary file"
        ;;
    text_garbage)
        head -c 16384 "$KLINEAGE" | tr -d '\000' >"$f" # under the token limit (docs/syntax.md, "Limits")
        run tgarbage 1 parse "$f"
        expect tgarbage out "(partial: the file has syntax errors)"
        grep -qE "^error: $f:[0-9]+:[0-9]+: " "$TMP/tgarbage.err" || fail "text_garbage: no located error"
        run tgarbagej 1 parse --json "$f"
        valid_utf8 "$TMP/tgarbagej.out"
        valid_json "$TMP/tgarbagej.out"
        ;;
    ten_megabytes)
        # vector_add.cu again and again, names numbered, to just over 10 MiB
        local copies
        copies=$(awk -v limit=$((10 * 1024 * 1024)) '
            { lines[NR] = $0; size += length($0) + 1 }
            END { n = int(limit / size) + 1
                  for (c = 0; c < n; c++) for (i = 1; i <= NR; i++) {
                      l = lines[i]; gsub(/vector_add/, "vector_add_" c, l); gsub(/launch\(/, "launch_" c "(", l)
                      print l > FILENAME_OUT }
                  print n }' FILENAME_OUT="$f" "$CUDA/vector_add.cu")
        [ "$(wc -c <"$f")" -gt $((10 * 1024 * 1024)) ] || fail "ten_megabytes: the input is too small"
        # past the token limit: refused at once, with the place (docs/syntax.md, "Limits")
        run big 1 parse "$f"
        grep -qE "^error: $f:[0-9]+:[0-9]+: the file holds more than 32000 tokens" "$TMP/big.err" ||
            fail "ten_megabytes: no located token-limit error: $(head -c 300 "$TMP/big.err")"
        # as many copies as stay under it parse whole
        head -n $((100 * $(wc -l <"$CUDA/vector_add.cu"))) "$f" >"$f.100"
        run big100 0 parse "$f.100"
        expect big100 out "$f.100: 100 kernels, 0 device functions, 100 host functions, 100 launch sites"
        ;;
    unterminated_comment)
        printf '__global__ void k(float *x) {\n  x[0] = 1; /* never closed\n  x[1] = 2;\n}\n' >"$f"
        run comment 1 parse "$f"
        expect comment err "error: $f:$(pos "$f" '/*'): unterminated comment"
        expect comment out "kernel k 1:1"
        ;;
    nested_braces)
        for depth in 200 10000; do
            awk -v d=$depth 'BEGIN { printf "__global__ void deep(float *x) {"
                         for (i = 0; i < d; i++) printf "{"
                         printf "x[0] += 1;"
                         for (i = 0; i < d; i++) printf "}"
                         print "}" }' >"$f.$depth"
        done
        run braces 0 parse "$f.200"
        expect braces out "kernel deep 1:1"
        run bracesj 0 parse --json "$f.200"
        valid_json "$TMP/bracesj.out"
        # past the bracket limit: refused, with the place (docs/syntax.md, "Limits")
        run braces10k 1 parse "$f.10000"
        expect braces10k err "error: $f.10000:1:288: brackets nested more than 256 deep"
        ;;
    invalid_utf8)
        printf '// caf\xc3 \xff\xfe\n__global__ void g(float *x) { const char *s = "\xc3\x28"; x[0] = s[0]; }\n' >"$f"
        run utf8 0 parse "$f"
        expect utf8 out "kernel g 2:1"
        run utf8j 0 parse --json "$f"
        valid_utf8 "$TMP/utf8j.out"
        valid_json "$TMP/utf8j.out"
        printf '__global__ void k\xe9(float *x) { x[0] = 1; }\n' >"$f"
        run utf8name 1 parse --json "$f"
        valid_utf8 "$TMP/utf8name.out"
        valid_json "$TMP/utf8name.out"
        valid_utf8 "$TMP/utf8name.err"
        ;;
    directory)
        run dir 1 parse "$TMP"
        expect dir err "error: $TMP: is a directory, expected a file"
        ;;
    missing_file)
        run missing 1 parse "$TMP/no_such.cu"
        expect missing err "error: $TMP/no_such.cu: cannot open: No such file or directory"
        ;;
    *)
        fail "unknown bad-input case '$1'"
        ;;
    esac
}

case "${1:-}" in
"") general ;;
golden) golden "${2:?golden NAME}" ;;
bad) bad "${2:?bad CASE}" ;;
*) fail "usage: test_parse.sh [golden NAME | bad CASE]" ;;
esac

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok"
