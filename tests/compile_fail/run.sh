#!/usr/bin/env bash
# One compile-fail case: compiles <source> with -DCASTOR_CASE=<case> and the
# project's include paths, and passes when the compiler refuses it with the
# diagnostic named by the case's "// expect:" line (the line after its
# `#if`/`#elif CASTOR_CASE == <case>`). A case that compiles, or fails with
# another message, fails the test and shows the compiler's output.
# Case 0 is the control: it must compile, warnings as errors.
# usage: run.sh <compiler> <source> <case> <source root>
set -uo pipefail
compiler=$1 source=$2 case=$3 root=$4
if [ "$case" = 0 ]; then  # the control: everything else in the file compiles
  LC_ALL=C timeout 300 "$compiler" -std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Werror \
    -D_GLIBCXX_USE_CXX11_ABI=1 -DCASTOR_CASE=0 -I"$root" -isystem /usr/include/torch/csrc/api/include "$source"
  exit
fi
expect=$(awk -v c="$case" '$0 ~ "CASTOR_CASE == " c "$" {getline; sub(/^\/\/ expect: /, ""); print; exit}' "$source")
if [ -z "$expect" ]; then
  echo "case $case of $source has no '// expect:' line"
  exit 1
fi
out=$(LC_ALL=C timeout 300 "$compiler" -std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter \
  -D_GLIBCXX_USE_CXX11_ABI=1 -DCASTOR_CASE="$case" -I"$root" -isystem /usr/include/torch/csrc/api/include \
  "$source" 2>&1)
rc=$?
if [ $rc -eq 0 ]; then
  echo "case $case compiled, but it must fail with: $expect"
  exit 1
fi
if ! grep -qF -- "$expect" <<<"$out"; then
  echo "case $case failed to compile (rc $rc) without the expected diagnostic: $expect"
  echo "$out" | head -40
  exit 1
fi
echo "case $case: refused with: $expect"
