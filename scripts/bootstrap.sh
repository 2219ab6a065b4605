#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks to build and test klineage.
# Idempotent: installs only what is missing; says clearly what it cannot install.
set -u

# Tools: whatever provides the command will do (npm may come with a Node.js that is not
# Debian's). Libraries: Debian's -dev packages.
# clang and its compiler-rt (libFuzzer): the fuzz targets (fuzz/run.sh, docs/fuzzing.md), which the
# test suite runs for a bounded time.
tools=(cmake:cmake make:make gcc:gcc pkg-config:pkg-config npm:npm python3:python3 clang:clang)
libraries=(libtree-sitter-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev libcmocka-dev
           libclang-rt-dev libcairo2-dev libseccomp-dev)

missing=()
for t in "${tools[@]}"; do
  command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
for p in "${libraries[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo"; else
    echo "bootstrap: these Debian packages are missing and I cannot install them (not root, no sudo):" >&2
    echo "  apt-get install ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
    $sudo apt-get update -qq >/dev/null 2>&1
    if ! $sudo apt-get install -y -qq "${missing[@]}"; then
      echo "bootstrap: apt-get could not install: ${missing[*]}" >&2
      exit 1
    fi
  fi
fi

# nvcc compiles candidates; without it klineage still builds, parses and replays.
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "bootstrap: note: nvcc (the CUDA toolkit) was not found; klineage will build, parse, rewrite" >&2
  echo "           and replay recorded verdicts, but cannot compile candidates. Install the CUDA" >&2
  echo "           toolkit, or put nvcc on PATH (or set KLINEAGE_NVCC)." >&2
fi
exit 0
