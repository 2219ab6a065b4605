#!/bin/bash
# Every kernel file of the style corpus (corpus/*/naive.cu, expert.cu, variants/*.cu) run on the
# CPU through the CUDA emulation (tests/corpus/emulate.py) at every check shape with tensors of at
# most KL_EMU_MAX_ELEMENTS elements (default 5,000,000), twice: tensors 256-byte aligned and
# tensors ending at a guard page; each output compared with the float64 reference at the task's
# tolerance. Two tasks at a time, sharing the emulated runtime's precompiled header (most of each
# compile). Then the emulation itself is checked: a kernel that reads past the end, one that is
# wrong at the edge, a misaligned float4 load and a barrier that one thread skips while its warp
# waits for it must each be caught.
set -u
: "${KL_SOURCE_DIR:?}"
C="$KL_SOURCE_DIR/corpus"
E="$KL_SOURCE_DIR/tests/corpus/emulate.py"
T=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-emu-XXXXXX")
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
command -v g++ >/dev/null || { echo "note: no g++: the emulation was not run"; exit 0; }

export C E T
export MAXE=${KL_EMU_MAX_ELEMENTS:-5000000}
ls -d "$C"/*/ | xargs -n1 basename | xargs -P 2 -I{} bash -c '
    t={}
    files=("$C/$t/naive.cu")
    [ -f "$C/$t/expert.cu" ] && files+=("$C/$t/expert.cu")
    for v in "$C/$t"/variants/*.cu; do [ -f "$v" ] && files+=("$v"); done
    python3 "$E" "$C/$t" "${files[@]}" --work "$T/$t" --pch-dir "$T/pch" --max-elements "$MAXE" -q >"$T/$t.log" 2>&1
    echo $? >"$T/$t.rc"
'
for d in "$C"/*/; do
    t=$(basename "$d")
    if [ "$(cat "$T/$t.rc" 2>/dev/null)" != 0 ]; then
        fail "corpus/$t: the emulated run found a wrong or crashing kernel"
        tail -30 "$T/$t.log" >&2
    else
        n=$(grep -c "correct at" "$T/$t.log")
        want=$((2 * $(ls "$C/$t"/*.cu "$C/$t"/variants/*.cu 2>/dev/null | wc -l)))
        [ "$n" -eq "$want" ] || fail "corpus/$t: $n emulated runs reported correct, expected $want"
    fi
done

# The emulation catches what it claims to. Each broken kernel is a small edit of a corpus kernel.
mk() { sed "$2" "$C/$1" >"$T/$3"; cmp -s "$C/$1" "$T/$3" && fail "the edit for $3 changed nothing"; }
mk gemm_nt/naive.cu 's/if (i >= m || j >= n) return;/if (i > m || j > n) return;/' past_end.cu
mk gemm_nt/naive.cu 's/for (int p = 0; p < k; ++p)/for (int p = 0; p < k - (k > 5); ++p)/' short_k.cu
mk matmul/expert.cu 's/const bool vec = k % 4 == 0 \&\& n % 4 == 0 \&\&/const bool vec = n % 4 == 0 \&\&/' misaligned.cu
python3 - "$C/sumsq/expert.cu" "$T/deadlock.cu" <<'PY'
import sys
s = open(sys.argv[1]).read()
s2 = s.replace("        if (lane == 0) temp.warp_sums[warp] = value;\n        __syncthreads();",
               "        if (lane == 0) temp.warp_sums[warp] = value;\n        if (threadIdx.x != 1) __syncthreads();")
assert s2 != s
open(sys.argv[2], "w").write(s2)
PY
expect_caught() { # FILE TASK SHAPES TEXT
    python3 "$E" "$C/$2" "$T/$1" --shapes "$3" --work "$T/w-$1" --pch-dir "$T/pch" -q >"$T/$1.log" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "$1: exit $rc, expected 1 (a wrong kernel): $(tail -3 "$T/$1.log")"
    grep -q "$4" "$T/$1.log" || fail "$1: the log lacks \"$4\": $(tail -5 "$T/$1.log")"
}
expect_caught past_end.cu gemm_nt 0,2 "signal 11"
expect_caught short_k.cu gemm_nt 2,3 "WRONG"
expect_caught misaligned.cu matmul 4 "misaligned address"
expect_caught deadlock.cu sumsq 6 "deadlock"

if [ $failures -ne 0 ]; then
    echo "$failures failures"
    exit 1
fi
echo "corpus: every kernel correct in emulation"
