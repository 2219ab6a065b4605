#!/usr/bin/env bash
# Fuzz every target (or those named) with libFuzzer for a bounded time each (docs/fuzzing.md).
#   fuzz/run.sh [BUILD_DIR] [TARGET…]      (default BUILD_DIR: build-fuzz)
# Environment: KL_FUZZ_SECONDS (per target; default 20), KL_FUZZ_MAX_LEN (default: libFuzzer's),
# KL_GRAMMAR_TARBALL (reuse a fetched grammar), KL_FUZZ_JOBS (build jobs; default nproc),
# KL_FUZZ_BUILD_DIR (a clang build to use instead of BUILD_DIR), KL_FUZZ_PARALLEL (targets fuzzed at
# once, each for its KL_FUZZ_SECONDS; default 1).
# Builds a clang configuration (-DKL_FUZZ=ON, ASan + UBSan) in BUILD_DIR, runs each target on its
# committed corpus (fuzz/corpus/T) and regressions (fuzz/regressions/T) first, then fuzzes it,
# keeping what it finds in BUILD_DIR/corpus/T. Exit 1 when any target crashed, leaked or timed
# out; the input is saved as BUILD_DIR/crashes/T-… and printed as a line to copy into
# fuzz/regressions/T/.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-fuzz}
[ $# -gt 0 ] && shift
# KL_FUZZ_BUILD_DIR wins over the argument: reuse one clang build (e.g. for the test suite's run)
build=${KL_FUZZ_BUILD_DIR:-$build}
seconds=${KL_FUZZ_SECONDS:-20}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(source task expr predicate skill answer archive)

if ! command -v clang >/dev/null 2>&1; then
    "$here/scripts/bootstrap.sh" || exit 1
fi
if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang is needed (apt-get install clang libclang-rt-dev)" >&2
    exit 1
fi

mkdir -p "$build"
extra=()
[ -n "${KL_GRAMMAR_TARBALL:-}" ] && [ -f "$KL_GRAMMAR_TARBALL" ] && extra+=("-DKL_GRAMMAR_TARBALL=$KL_GRAMMAR_TARBALL")
if ! cmake -S "$here" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKL_FUZZ=ON \
    -DKL_SANITIZE=ON -DKL_TESTS=OFF "${extra[@]}" >"$build/configure.log" 2>&1; then
    cat "$build/configure.log" >&2
    exit 1
fi
names=()
for t in "${targets[@]}"; do names+=("fuzz_$t"); done
if ! cmake --build "$build" -j "${KL_FUZZ_JOBS:-$(nproc)}" --target "${names[@]}" >"$build/build.log" 2>&1; then
    tail -40 "$build/build.log" >&2
    exit 1
fi

# LeakSanitizer is on (a leak fails a target); ASan aborts so libFuzzer saves the input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/crashes"
# fuzz_one T: run target T (its corpus and regressions first, then fuzzing); its line of the
# summary goes to $build/fuzz_T.summary, "ok" or "failed" to $build/fuzz_T.status
fuzz_one() {
    local t=$1
    local bin="$build/fuzz/fuzz_$t"
    mkdir -p "$build/corpus/$t"
    local seeds=("$here/fuzz/corpus/$t")
    # the parser's seeds are the project's own CUDA files, read where they are (no copies)
    [ "$t" = source ] && seeds=("$here/tests/data/cuda" "$here"/tasks/*/)
    [ -d "$here/fuzz/regressions/$t" ] && seeds+=("$here/fuzz/regressions/$t")
    local lenopt=()
    [ -n "${KL_FUZZ_MAX_LEN:-}" ] && lenopt=("-max_len=$KL_FUZZ_MAX_LEN")
    local log="$build/fuzz_$t.log" start rc took runs
    start=$(date +%s)
    "$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 "${lenopt[@]}" \
        -artifact_prefix="$build/crashes/$t-" "$build/corpus/$t" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        {
            echo "fuzz_$t: FAILED after ${took} s (exit $rc); log $log"
            grep -E "^==[0-9]+==ERROR|SUMMARY|Test unit written to|runtime error" "$log" | head -8
            for a in "$build/crashes/$t-"*; do
                [ -e "$a" ] && echo "  keep it: mkdir -p fuzz/regressions/$t && cp '$a' fuzz/regressions/$t/"
            done
        } >"$build/fuzz_$t.summary"
        echo failed >"$build/fuzz_$t.status"
    else
        echo "fuzz_$t: ${took} s, ${runs:-?} inputs, no crash ($(ls "$build/corpus/$t" | wc -l) in its corpus)" \
            >"$build/fuzz_$t.summary"
        echo ok >"$build/fuzz_$t.status"
    fi
}

# KL_FUZZ_PARALLEL targets at a time (default 1), each for its own KL_FUZZ_SECONDS
parallel=${KL_FUZZ_PARALLEL:-1}
running=0
for t in "${targets[@]}"; do
    rm -f "$build/fuzz_$t.status" "$build/fuzz_$t.summary"
    if [ "$running" -ge "$parallel" ]; then
        wait -n
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
    if [ "$(cat "$build/fuzz_$t.status" 2>/dev/null)" = ok ]; then
        cat "$build/fuzz_$t.summary"
    else
        failed=1
        if [ -s "$build/fuzz_$t.summary" ]; then cat "$build/fuzz_$t.summary" >&2; else echo "fuzz_$t: no result" >&2; fi
    fi
done
exit $failed
