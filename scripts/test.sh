#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# README command 2 (and what CI runs): the whole test suite, as timed stages (docs/TESTING.md says
# what each stage proves and what it costs):
#   setup         scripts/setup.sh --dev --arm64: test libraries, clang, clang-format, ccache, the Python
#                 reference toolkit in the virtual environment .venv/ ($CLEF_VENV), whose python runs every
#                 Python step, and the ARM64 cross toolchain, qemu-user and :arm64 libraries (dpkg multiarch;
#                 CLEF_TEST_ARM64=0 leaves these and the arm64 stage out, and says so in the table);
#   layer check   scripts/check_layers.py: no engine layer (src/<layer>) includes a layer it does not link;
#   function length
#                 scripts/check_function_length.py: no function in src/ or apps/ over 120 lines;
#   format check  scripts/check_format.sh: the C++ sources follow .clang-format;
#   libc++ compile check
#                 scripts/check_libcxx.sh: no Linux-only call outside the platform seams, and the engine
#                 layers compile with clang-14 and libc++ (-fsyntax-only -Werror; macOS's standard library);
#   release build release build with -Werror (every target: clef, test drivers, benchmarks; unity batches);
#   ctest (native) all GoogleTest unit tests at the native kernel level (the op tests switch every level);
#   models (0.8b, 0.8b-shapes)
#                 the 0.8b random-weight release folder and its one-block-per-kind twin, written once and
#                 shared by every test session below (CLEF_08B_DIR, CLEF_08B_SHAPES_DIR);
#   pytest tests/reference, tests/cli, tests/server, tests/hub
#                 live comparisons against the Python reference toolkit, the CLI tests (`clef mcp`
#                 included), the live `clef serve` tests and the `clef pull` / shared-cache tests against a
#                 local hub;
#   python package (pip install .), pytest tests/python
#                 the Python package built by pip into a fresh venv, checked against the CLI (Ray too);
#   isa LEVEL     for every other kernel level the CPU has (CLEF_ISA): the kernel-dependent live
#                 comparisons; AVX2 also runs the 0.8b layer shapes end to end (the "0.8b-shapes" preset).
#                 Every op against its scalar oracle at every level is the native ctest's job;
#   asan build, ctest (asan+ubsan)
#                 ASan + UBSan build of the unit-test binaries (-O0; kernels -O1 but attention and the
#                 delta rule -O0; only the kernel levels this CPU runs, every file compiled alone), run;
#   fuzz build, fuzz TARGET
#                 the libFuzzer targets (safetensors and GGUF headers, request, image), 10 s each (clang).
#   arm64 (cross build, qemu)
#                 scripts/test_arm64.sh, run BESIDE the stages above from the release build on, at the idle
#                 scheduling class (it takes only CPU time they leave unused): the arm64 preset cross-built
#                 with -Werror, every op and kernel test at every ARM level under qemu-user (128- and
#                 256-bit SVE; the slowest sve256 ones with CLEF_ARM64_FULL=1), level detection under
#                 several CPU models, and `clef decide` under qemu against the x86-64 answers (the corpus
#                 in fp32; int8, Q8_0 and Q4_K_M GGUF); its own step table (docs/ARM64.md). Its row is its
#                 own wall time, "waiting for arm64" what it added at the end. CLEF_TEST_ARM64=0 leaves it
#                 (and setup's --arm64 packages) out.
# Stops at the first failing stage. A table of stage -> seconds is printed at the end, also when a
# stage fails, and the run fails when it took longer than CLEF_TEST_BUDGET_S (default 2700 s = 45 min,
# CI's limit, on CI's slowest machine kind: 2 vCPUs, Zen 1 class, AVX2 only) so that a change that makes
# CI slow is caught by its author.
#
# Compiler cache: ccache (installed by setup.sh --dev) keeps its objects outside the clone
# (~/.cache/ccache); CCACHE_BASEDIR makes clones in other folders share them.
set -euo pipefail
if [[ ${1-} == -h || ${1-} == --help ]]; then
  sed -n '3,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
  exit 0
fi
[[ $# -eq 0 ]] || { echo "test.sh: no arguments expected (--help; the environment variables above tune it); got '$1'" >&2; exit 2; }
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${CLEF_FUZZ_SECONDS:-10}
BUDGET_S=${CLEF_TEST_BUDGET_S:-2700}
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

stage_names=()
stage_secs=()
stage_state=()
run_start=$SECONDS

print_table() {
  local total=$((SECONDS - run_start)) i
  echo
  echo "test.sh: stage times ($(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1); native kernel level ${native_isa:-?})"
  printf '  %-28s %8s  %s\n' stage seconds result
  for i in "${!stage_names[@]}"; do
    printf '  %-28s %8d  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" "${stage_state[$i]}"
  done
  printf '  %-28s %8d  (budget %d s)\n' total "$total" "$BUDGET_S"
  # CPU time of every process the run waited for: the shell's `times` (second line: children), run in
  # this shell (in a $(...) subshell it would count that subshell's children: none).
  local cpu
  times >build/.test-times 2>/dev/null || true
  cpu=$(sed -n 2p build/.test-times 2>/dev/null |
    awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } printf "%d", s }')
  cpu=${cpu:-0}
  ((total > 0)) && printf '  %-28s %8d  (%d%% of %d CPUs over the run)\n' "CPU (user + sys)" "$cpu" \
    $((100 * cpu / (total * $(nproc)))) "$(nproc)"
  if command -v ccache >/dev/null; then
    ccache -s 2>/dev/null | grep -E "^ *(Hits|Misses|Cache size)" | sed 's/^/  ccache: /' || true
  fi
}
trap print_table EXIT

# stage NAME COMMAND [ARGS...]: runs COMMAND (a function or program) with `set -e` in a subshell,
# records its wall time, and stops the run when it fails.
stage() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "== $name"
  set +e
  ( set -e; "$@" )
  rc=$?
  set -e
  stage_names+=("$name")
  stage_secs+=($((SECONDS - t0)))
  if ((rc != 0)); then
    stage_state+=("FAILED (exit $rc)")
    echo "test.sh: stage '$name' failed (exit $rc)" >&2
    exit "$rc"
  fi
  stage_state+=(ok)
}

ARM64=${CLEF_TEST_ARM64:-1}  # 1: the arm64 stage runs beside the x86-64 stages (below); 0: never
if [[ $ARM64 == 0 ]]; then
  stage setup bash scripts/setup.sh --dev
else
  stage setup bash scripts/setup.sh --dev --arm64
fi
# No engine layer includes a layer it does not link (src/CMakeLists.txt lists the order): seconds, before any build.
stage "layer check" python3 scripts/check_layers.py
# No function over 120 lines in src/ or apps/: about 2 s.
stage "function length" python3 scripts/check_function_length.py
# The C++ sources follow .clang-format (clang-format-14): seconds.
stage "format check" bash scripts/check_format.sh
# Linux-only calls stay in the platform seams; the engine layers compile against libc++ (clang-14,
# -fsyntax-only): about 1 min on 2 idle CPUs, 2 min beside other builds (docs/TESTING.md).
stage "libc++ compile check" bash scripts/check_libcxx.sh
# Every Python step (and anything the tests start by name, e.g. `jevcompat`) uses the venv.
export VIRTUAL_ENV=${CLEF_VENV:-$PWD/.venv}
export PATH="$VIRTUAL_ENV/bin:$PATH"
PY="$VIRTUAL_ENV/bin/python"
command -v ccache >/dev/null && ccache -z >/dev/null

build_release() {
  cmake --preset release -DCLEF_WERROR=ON >/dev/null
  cmake --build --preset release
}
stage "release build" build_release
stage "ctest (native)" ctest --preset release -j2

# The ARM64 stage (scripts/test_arm64.sh: cross build, qemu) runs from here on BESIDE the x86-64 stages, as
# a background job at the idle scheduling class (`chrt --idle`): it gets only CPU time the x86-64 stages
# leave unused (their compiles' serial links, one-threaded Python, the server and hub tests' waits: about
# a quarter of a 2-CPU run) and so costs the run little wall time; the x86-64 stages keep their
# timings. Its output goes to build/arm64-stage.log, printed when it ends (arm64_finish, at the end). It
# starts after the release build because it compares with that build's `clef`. If the x86-64 stages end
# with the budget nearly spent while it still runs, it is stopped and its row says so (the run does not
# fail on its account); CLEF_TEST_ARM64=0 leaves it out.
ARM64_LOG=build/arm64-stage.log
arm64_pid=""
arm64_start() {
  [[ $ARM64 == 0 ]] && return
  arm64_t0=$SECONDS
  rm -f build/arm64-stage.rc
  local -a idle=(chrt --idle 0)
  "${idle[@]}" true 2>/dev/null || idle=(nice -n 19)  # where SCHED_IDLE is not allowed: the lowest nice
  set -m  # its own process group (same session), so that it can be stopped as a whole
  (
    t0=$SECONDS rc=0
    CLEF_PYTHON="$PY" "${idle[@]}" bash scripts/test_arm64.sh >"$ARM64_LOG" 2>&1 || rc=$?
    echo "$rc $((SECONDS - t0))" >build/arm64-stage.rc
  ) &
  arm64_pid=$!
  set +m
  echo "== arm64 (cross build, qemu): started beside the x86-64 stages (${idle[*]}; log $ARM64_LOG)"
}
arm64_stop() {  # on exit: a run that fails or is interrupted does not leave the arm64 stage running
  [[ -n $arm64_pid ]] && kill -TERM -- "-$arm64_pid" 2>/dev/null
  arm64_pid=""
}
arm64_finish() {
  local name="arm64 (cross build, qemu)" t0=$SECONDS left rc secs
  if [[ $ARM64 == 0 ]]; then
    stage_names+=("$name") stage_secs+=(0) stage_state+=("skipped (CLEF_TEST_ARM64=0)")
    return
  fi
  # Wait while the budget lasts, less a minute for the table and CI's own steps.
  left=$((BUDGET_S - 60 - (SECONDS - run_start)))
  while kill -0 "$arm64_pid" 2>/dev/null && ((SECONDS - t0 < left)); do sleep 1; done
  if kill -0 "$arm64_pid" 2>/dev/null; then
    arm64_stop
    wait 2>/dev/null || true
    cat "$ARM64_LOG"
    stage_names+=("$name" "waiting for arm64") stage_secs+=($((SECONDS - arm64_t0)) $((SECONDS - t0)))
    stage_state+=("STOPPED at the budget, unfinished (its log above)" "-")
    echo "test.sh: the arm64 stage did not finish within the budget and was stopped (its log above)" >&2
    return
  fi
  wait "$arm64_pid" || true
  arm64_pid=""
  echo "== arm64 (cross build, qemu): its output"
  cat "$ARM64_LOG"
  read -r rc secs <build/arm64-stage.rc || { rc=1 secs=$((SECONDS - arm64_t0)); }
  stage_names+=("$name" "waiting for arm64") stage_secs+=("$secs" $((SECONDS - t0)))
  if ((rc != 0)); then
    stage_state+=("FAILED (exit $rc)" "-")
    echo "test.sh: stage '$name' failed (exit $rc)" >&2
    exit "$rc"
  fi
  stage_state+=("ok (beside the x86-64 stages, from the release build on)" ok)
}
trap 'arm64_stop; print_table' EXIT
arm64_start

export CLEF_BIN="$PWD/build/release/bin/clef"
native_isa=$("$CLEF_BIN" --version | sed -n 's/^kernels: \([a-z0-9]*\) .*/\1/p')
# The 0.8b preset (~2 GB) and the 0.8b-shapes preset (~0.7 GB), written once for every pytest session
# below (tests/reference/conftest.py: folder_08b, folder_08b_shapes); seed 2, which the committed
# bf16 drift goldens were measured on.
make_folders() {
  local preset d
  for preset in 0.8b 0.8b-shapes; do
    d=build/models/clef-$preset-seed2
    if [[ ! -f $d/SHA256SUMS ]]; then
      rm -rf "$d"
      "$PY" tools/reference/make_model.py --preset "$preset" --out "$d" --seed 2 --dtype bf16 >/dev/null
    fi
  done
}
stage "models (0.8b, 0.8b-shapes)" make_folders
export CLEF_08B_DIR="$PWD/build/models/clef-0.8b-seed2" CLEF_08B_SHAPES_DIR="$PWD/build/models/clef-0.8b-shapes-seed2"

# Separate processes: each folder's conftest.py is imported as the module "conftest".
# Natively both 0.8b folders run: the full preset (depth: 24 blocks, the bf16 drift test on the requests up
# to 170 tokens) and its 0.8b-shapes twins (mark shapes08b; length: every corpus request), which the AVX2
# level runs again below.
# The reference tests run in two pytest-xdist workers, a test file per worker at a time (module and
# session fixtures stay whole): much of their time is one-threaded Python or one-threaded clef, so
# the second core would idle. tests/server stays serial (it measures latencies).
XDIST=(-n 2 --dist loadfile)
stage "pytest tests/reference" "$PY" -m pytest -q -p no:cacheprovider --durations=20 "${XDIST[@]}" tests/reference
stage "pytest tests/cli" "$PY" -m pytest -q -p no:cacheprovider --durations=5 tests/cli
stage "pytest tests/server" "$PY" -m pytest -q -p no:cacheprovider --durations=5 tests/server
stage "pytest tests/hub" "$PY" -m pytest -q -p no:cacheprovider --durations=5 tests/hub

# The Python package (docs/PYTHON.md), installed as a user installs it: `pip install .` into a fresh
# venv (made from the interpreter .venv was made from), with the ray and test extras. pip builds in
# build/python through the compiler cache, so the release build's objects serve it (the flags match:
# CLEF_WERROR as above, and the same compiler name, which ccache hashes: c++ and g++ miss each other).
# Then tests/python checks it against the CLI, Ray included.
python_package() {
  local base v=build/pyvenv
  base=$("$PY" -c 'import sys; print(sys._base_executable)')
  rm -rf "$v"
  "$base" -m venv "$v"
  CXX=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/release/CMakeCache.txt) \
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$v/bin/pip" install -q --progress-bar off \
    --config-settings=cmake.define.CLEF_WERROR=ON ".[ray,test]"
}
stage "python package (pip install .)" python_package
stage "pytest tests/python" build/pyvenv/bin/python -m pytest -q -p no:cacheprovider --durations=5 tests/python

# Every other kernel level this CPU has: the unit tests above switched levels in-process for the
# kernels (every op against its scalar oracle at every level); here the whole engine (oneDNN capped too)
# runs forced to each level through the live comparisons whose numbers come from the kernels
# (backbone, vision tower, decide end to end, state cache, images). The tokenizer/render/
# request parity tests run no kernel and ran above. AVX2 (x86-64-v3, the most common user CPU)
# also runs the 0.8b layer shapes (tests marked `shapes08b`); on a CPU whose best level is AVX2 the
# full 0.8b tests above already ran at that level.
supported=$("$CLEF_BIN" --version | sed -n 's/.*supported here: \([a-z0-9, ]*\) (.*/\1/p' | tr -d ' ' | tr ',' ' ')
# The joint head is not here: its ops give the same bits at every level (-ffp-contract=off, fixed
# summation order), which the native ctest checks per level (tests/unit/test_head_ops.cc).
kernel_tests=(tests/reference/test_backbone.py tests/reference/test_vision_tower.py tests/reference/test_decide_e2e.py
              tests/reference/test_state_cache.py tests/reference/test_decide_images.py tests/reference/test_08b.py)
isa_level() {
  local isa=$1 marks="not slow and not shapes08b"
  [[ $isa == avx2 ]] && marks="not slow"
  CLEF_ISA=$isa "$PY" -m pytest -q -p no:cacheprovider --durations=10 "${XDIST[@]}" -m "$marks" "${kernel_tests[@]}"
}
for isa in ${CLEF_TEST_ISA_LEVELS:-$supported}; do
  [[ "$isa" == "$native_isa" ]] && continue
  stage "isa $isa" isa_level "$isa"
done

build_asan() {
  cmake --preset asan -DCLEF_WERROR=ON >/dev/null
  # Only what ctest runs: the unit-test binaries.
  cmake --build --preset asan --target clef_unit_tests clef_ops_tests clef_vision_tests
}
stage "asan build" build_asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  stage "ctest (asan+ubsan)" ctest --preset asan -j2

build_fuzz() {
  cmake --preset fuzz >/dev/null
  if ! cmake --build --preset fuzz --target fuzz_safetensors_header fuzz_gguf_header fuzz_request fuzz_image \
       > build/fuzz-build.log 2>&1; then
    tail -n 40 build/fuzz-build.log
    echo "test.sh: the fuzz build (clang-14, preset fuzz) failed; see build/fuzz-build.log" >&2
    return 1
  fi
}
stage "fuzz build" build_fuzz

# fuzz_one TARGET SEED_SCRIPT [SEED_SCRIPT_ARGS...]: seeds a corpus, runs TARGET for FUZZ_SECONDS.
fuzz_one() {
  local target=$1 seeds=$2 corpus=build/fuzz/corpus_$1
  shift 2
  mkdir -p "$corpus"
  "$PY" "$seeds" "$@" "$corpus"
  "./build/fuzz/tests/fuzz/$target" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=1 "$corpus" > "build/fuzz/$target.log" 2>&1 || { tail -n 40 "build/fuzz/$target.log"; return 1; }
  grep -E "^(Done|stat::number_of_executed_units|stat::new_units_added)" "build/fuzz/$target.log"
}
stage "fuzz safetensors header" fuzz_one fuzz_safetensors_header tests/fuzz/make_seeds.py
stage "fuzz gguf header" fuzz_one fuzz_gguf_header tests/fuzz/make_gguf_seeds.py
stage "fuzz request" fuzz_one fuzz_request tests/fuzz/make_request_seeds.py tests/data/requests
stage "fuzz image" fuzz_one fuzz_image tests/fuzz/make_image_seeds.py

# The ARM64 stage ends here: it started beside the x86-64 stages (arm64_start, above). Its row is its own
# wall time; "waiting for arm64" is what it added to the run.
arm64_finish
total=$((SECONDS - run_start))
if ((total > BUDGET_S)); then
  echo "test.sh: every stage passed, but the run took ${total} s, over its budget of ${BUDGET_S} s" \
       "(CLEF_TEST_BUDGET_S; CI's limit is 45 minutes): make the slow stage cheaper (docs/TESTING.md)" >&2
  exit 1
fi
echo "test.sh: all stages passed in ${total} s (budget ${BUDGET_S} s)"
