#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ARM64 (aarch64) check on an x86-64 Debian 12 machine (docs/ARM64.md "Building and testing on an x86-64 machine"): cross-builds the
# arm64 preset and runs it under qemu-user, in timed steps:
#   arm64 build     cmake --preset arm64 (-Werror) and the targets clef, clef_ops_tests, clef_vision_tests;
#   ops VL16        every op and kernel test that runs per level (OpsAtLevel, HeadOpsAtLevel,
#                   VisionOpsAtLevel, Int8/QuantAtLevel, ...) against its scalar oracle, plus the int8 and
#                   block-quantized kernels and the GEMM, under qemu -cpu max,sve-default-vector-length=16:
#                   the levels baseline, neon, neon-dotprod, neon-i8mm and sve2-128 in one process,
#                   every int8 and block-quantized kernel (neon, neon-dotprod SDOT, neon-i8mm SMMLA)
#                   bit for bit against the scalar oracle, and the BFMMLA bf16 GEMM against its
#                   error bound;
#   ops VL32        the same per-level tests at sve256 (-cpu max,sve-default-vector-length=32), less the
#                   attention and chunked delta-rule ones unless CLEF_ARM64_FULL=1 (see FULL below);
#   version         clef --version names the detected level under cortex-a76 (neon-dotprod),
#                   max,sve=off (neon-i8mm), max with 256-bit SVE (sve256) and with 128-bit SVE2
#                   (sve2-128); CLEF_ISA=sve256 on cortex-a76 exits 4 naming the levels it has; the
#                   ARM peak meter measures SDOT but reports 0 for SMMLA/BFMMLA under cortex-a76;
#   decide          `clef decide --jsonl` of the request corpus (tests/data/requests/corpus.jsonl: its 21
#                   requests under 2,000 tokens; all 24 with CLEF_ARM64_FULL=1) on a tiny random model
#                   (clef make-model --preset tiny, written by the x86 binary) under qemu at neon-i8mm
#                   and sve2-128 (neon and sve256 too with CLEF_ARM64_FULL=1), every probability within
#                   1e-4 of the x86 binary's answer; the model folder the arm64 binary writes from the
#                   same seed has the same bytes;
#   quantized       the tiny model as int8 (--precision int8), as a Q8_0 GGUF and as a Q4_K_M GGUF
#                   (tools/reference/make_gguf.py, in the project's venv): at the baseline level the
#                   backbone's hidden states (the head's inputs) are bit-identical to x86-64's; at
#                   the native levels (neon-i8mm runs the SMMLA kernels, cortex-a76 the SDOT ones) every
#                   probability is within 1e-3 of x86-64's native answer (the spread between x86-64's
#                   own levels on these files: docs/ARM64.md "Numerics").
# Stops at the first failing step and prints a table of step -> seconds. Needs `scripts/setup.sh
# --dev --arm64` (the test tier: GoogleTest for the x86 release build, the Python venv for the
# quantized step) and the x86 release binary (build/release/bin/clef; CLEF_X86_BIN overrides; built
# here when missing). Tests that prove nothing more under emulation than natively (threads, file formats,
# the backbone at real sizes) are left to the native ctest.
set -euo pipefail
if [[ ${1-} == -h || ${1-} == --help ]]; then
  sed -n '3,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
  exit 0
fi
[[ $# -eq 0 ]] || { echo "test_arm64: no arguments expected (--help); got '$1'" >&2; exit 2; }
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
JOBS=${CLEF_JOBS:-2}
QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64 ||
  { echo "test_arm64: no qemu-aarch64; run scripts/setup.sh --arm64" >&2; exit 1; })
X86_BIN=${CLEF_X86_BIN:-$PWD/build/release/bin/clef}
# The venv of the quantized step (CLEF_PYTHON, else CLEF_VENV's, else .venv's python), checked before
# the build so that a missing test tier is said at once.
PY=${CLEF_PYTHON:-${CLEF_VENV:-$PWD/.venv}/bin/python}
[[ -x $PY ]] || { echo "test_arm64: no $PY: run scripts/setup.sh --dev --arm64 (the test tier makes the venv in .venv, or CLEF_VENV; CLEF_PYTHON names another python)" >&2; exit 1; }
BIN=$PWD/build/arm64/bin
work=$(mktemp -d /tmp/clef-arm64.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The per-level suites, and the ARM-relevant non-level tests of the op binaries (the int8 and
# block-quantized kernels and their packing, the GEMM and its precisions, the level names).
LEVEL_FILTER='Isa/*:Levels/*'
OPS_EXTRA='IsaLevels.*:Supported/*:Int8.*:Quant.*:Ops.*:Peaks/*:IntegerPeaks.*:Bf16Bfmmla.*'
# Left out: a thread-count and a profile-timing test (nothing architecture-specific). Every op test
# runs at every level, neon-dotprod and neon-i8mm included (their Highway kernels are the neon ones,
# about 30 s more, but their GEMMs are their own); the int8 and block-quantized kernels also run
# one by one in Int8Kernels/QuantKernels (every kernel the CPU has).
OPS_SKIP='-Ops.ThreadCountIsCappedAtTheMachine:Ops.ProfileScopeOfTheBf16ConversionExcludesTheMatmul'

# CLEF_ARM64_FULL=1: also the sve256 tests that qemu 7.2 runs slowly on some hosts (the attention
# and chunked delta-rule tests at sve256: 18-35x their sve2-128 time on an Intel Xeon host, about
# 5 min together; docs/ARM64.md "Building and testing on an x86-64 machine"), the whole corpus, and
# the corpus at neon and sve256. CI runs without it.
FULL=${CLEF_ARM64_FULL:-0}
SVE256_SLOW='Isa/OpsAtLevel.Attention*VsReference/sve256:Isa/OpsAtLevel.AttentionBf16KvIsAttentionBf16BitForBit/sve256'
SVE256_SLOW+=':Isa/OpsAtLevel.GatedDeltaRule*VsRecurrent/sve256'

names=() secs=() start=$SECONDS
table() {
  echo
  echo "test_arm64: step times ($(nproc) CPUs; qemu $("$QEMU" --version | sed -n '1s/.*version \([^ ]*\).*/\1/p'))"
  for i in "${!names[@]}"; do printf '  %-14s %6d s\n' "${names[$i]}" "${secs[$i]}"; done
  printf '  %-14s %6d s\n' total $((SECONDS - start))
}
step() {
  local name=$1 t=$SECONDS
  shift
  echo "== $name"
  "$@"
  names+=("$name") secs+=($((SECONDS - t)))
}
trap 'table; rm -rf "$work"' EXIT

qemu() {  # qemu CPU PROGRAM ARGS...
  local cpu=$1
  shift
  "$QEMU" -cpu "$cpu" "$@"
}

build() {
  cmake --preset arm64 -DCLEF_WERROR=ON >/dev/null
  cmake --build build/arm64 -j"$JOBS" --target clef clef_ops_tests clef_vision_tests
  if [[ ! -x $X86_BIN ]]; then
    cmake --preset release -DCLEF_WERROR=ON >/dev/null
    cmake --build build/release -j"$JOBS" --target clef
  fi
}

ops_at() {  # ops_at CPU FILTER: both op binaries under qemu, each split in JOBS gtest shards run at once
  local cpu=$1 filter=$2 b i rc=0
  local -a pids=()
  for b in clef_ops_tests clef_vision_tests; do
    for ((i = 0; i < JOBS; i++)); do
      GTEST_TOTAL_SHARDS=$JOBS GTEST_SHARD_INDEX=$i qemu "$cpu" "$BIN/$b" --gtest_filter="$filter" --gtest_brief=1 &
      pids+=($!)
    done
  done
  for i in "${pids[@]}"; do wait "$i" || rc=$?; done
  return "$rc"
}

expect_level() {  # expect_level CPU LEVEL
  local out
  out=$(qemu "$1" "$BIN/clef" --version)
  grep -q "^kernels: $2 (" <<<"$out" || { echo "test_arm64: -cpu $1: expected level $2, got:" >&2; echo "$out" >&2; return 1; }
  echo "  -cpu $1: $(sed -n 's/^kernels: //p' <<<"$out")"
}

version() {
  expect_level cortex-a76 neon-dotprod
  expect_level max,sve=off neon-i8mm
  expect_level max,sve-default-vector-length=32 sve256
  expect_level max,sve-default-vector-length=16 sve2-128
  qemu max,sve-default-vector-length=32 "$BIN/clef" --version | grep -q "^GEMM: OpenBLAS "
  local rc=0 err
  err=$(CLEF_ISA=sve256 qemu cortex-a76 "$BIN/clef" --version 2>&1 >/dev/null) || rc=$?
  [[ $rc -eq 4 && $err == *"CLEF_ISA=sve256: this CPU supports only baseline, neon, neon-dotprod"* ]] ||
    { echo "test_arm64: CLEF_ISA=sve256 on cortex-a76: exit $rc, '$err' (want exit 4 naming the levels)" >&2; return 1; }
  echo "  CLEF_ISA=sve256 on cortex-a76: exit 4: $err"
  # The peak meter runs only the instructions the CPU has (cortex-a76: SDOT, no SMMLA/BFMMLA).
  qemu cortex-a76 "$BIN/clef_ops_tests" --gtest_filter='Peaks/*' --gtest_brief=1
}

# Two SystemOne responses, or two --jsonl answer files line by line (compare_answers WANT GOT TOL):
# the same keys and strings, every number
# (probabilities and confidences, printed with 4 decimals) within TOL (1e-4: at most one unit of
# the last printed digit), a score (sum_i i * p_i over its options 0..n-1) within TOL * sum_i i.
compare_answers() {
  python3 - "$@" <<'EOF'
import json, sys
def load(p):  # one response, or a --jsonl answer file (one response per line)
    text = open(p).read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines()]
want, got = (load(p) for p in sys.argv[1:3])
tol = float(sys.argv[3])
def walk(a, b, path, t):
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            # A score is sum_i i * p_i over its options 0..n-1: within tol * sum_i i when every p_i is.
            st = tol * sum(range(len(a.get("probabilities", {})))) if k == "score" else t
            walk(a[k], b[k], f"{path}.{k}", st)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)): walk(x, y, f"{path}[{i}]", t)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        assert abs(a - b) <= t + 1e-12, f"{path}: {a} vs {b} (tolerance {t})"  # slack for the decimal printing
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"
walk(want, got, "$", tol)
EOF
}

decide() {
  "$X86_BIN" make-model --preset tiny --out "$work/tiny" >/dev/null
  # The request corpus, one request per line (each corpus line is {"name": ..., "request": {...}}),
  # and the x86-64 answers. Without CLEF_ARM64_FULL the requests under 2,000 tokens (21 of 24, about
  # a quarter of the corpus's tokens; the other three are 7k-12k-token states, minutes under qemu).
  python3 -c 'import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps(json.loads(line)["request"], ensure_ascii=False))' tests/data/requests/corpus.jsonl >"$work/corpus.jsonl"
  "$X86_BIN" decide -m "$work/tiny" --threads 2 --no-progress --jsonl "$work/corpus.jsonl" --out "$work/x86-all.jsonl"
  python3 - "$work" "$FULL" <<'PY'
import json, sys
work, full = sys.argv[1], sys.argv[2] == "1"
reqs = open(f"{work}/corpus.jsonl", encoding="utf-8").read().splitlines()
answers = open(f"{work}/x86-all.jsonl", encoding="utf-8").read().splitlines()
if len(answers) != len(reqs) or not all('"answers"' in a for a in answers):
    sys.exit(f"test_arm64: x86-64 did not answer every corpus request ({len(answers)} lines for {len(reqs)})")
keep = [i for i, a in enumerate(answers) if full or json.loads(a)["usage"]["input_tokens"] < 2000]
open(f"{work}/run.jsonl", "w", encoding="utf-8").write("".join(reqs[i] + "\n" for i in keep))
open(f"{work}/x86.jsonl", "w", encoding="utf-8").write("".join(answers[i] + "\n" for i in keep))
PY
  local n
  n=$(wc -l <"$work/run.jsonl")
  # neon-i8mm (-cpu max,sve=off) and sve2-128 (VL16); neon and sve256 (VL32, slow under qemu on some
  # hosts) with CLEF_ARM64_FULL=1.
  local -a runs=("max,sve=off:" "max,sve-default-vector-length=16:")
  [[ $FULL -eq 1 ]] && runs+=("max,sve=off:neon" "max,sve-default-vector-length=32:")
  local run cpu isa level
  for run in "${runs[@]}"; do
    cpu=${run%%:*} isa=${run#*:}
    level=$(CLEF_ISA=$isa qemu "$cpu" "$BIN/clef" --version | sed -n 's/^kernels: \([^ ]*\).*/\1/p')
    CLEF_ISA=$isa qemu "$cpu" "$BIN/clef" decide -m "$work/tiny" --threads 2 --no-progress \
      --jsonl "$work/run.jsonl" --out "$work/arm64-$level.jsonl"
    compare_answers "$work/x86.jsonl" "$work/arm64-$level.jsonl" 1e-4
    echo "  $level: $n corpus requests, every probability within 1e-4 of x86-64's"
  done
  qemu max,sve=off "$BIN/clef" make-model --preset tiny --out "$work/tiny-arm64" >/dev/null
  diff -r "$work/tiny" "$work/tiny-arm64" >/dev/null ||
    { echo "test_arm64: make-model wrote different bytes on arm64" >&2; diff -rq "$work/tiny" "$work/tiny-arm64" >&2; return 1; }
  echo "  make-model: the arm64 folder has the x86 folder's bytes"
}

quantized() {
  local py=$PY t  # the project's venv (checked at the start)
  [[ -d $work/tiny ]] || "$X86_BIN" make-model --preset tiny --out "$work/tiny" >/dev/null
  for t in q8_0 q4_k_m; do
    "$py" tools/reference/make_gguf.py --model "$work/tiny" --out "$work/tiny-$t.gguf" --type "$t" --layout clef >/dev/null
  done
  local -a models=("$work/tiny --precision int8" "$work/tiny-q8_0.gguf" "$work/tiny-q4_k_m.gguf")
  local m i=0 cpu
  for m in "${models[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086  # "FOLDER --precision int8" is two arguments
    CLEF_ISA=baseline "$X86_BIN" hidden -m $m --random-ids 200:3 --threads 2 --out "$work/h-x86-$i" >/dev/null
    # shellcheck disable=SC2086
    CLEF_ISA=baseline qemu max "$BIN/clef" hidden -m $m --random-ids 200:3 --threads 2 --out "$work/h-arm-$i" >/dev/null
    cmp -s "$work/h-x86-$i.chunk512.npy" "$work/h-arm-$i.chunk512.npy" ||
      { echo "test_arm64: $m: baseline hidden states differ from x86-64's" >&2; return 1; }
    # shellcheck disable=SC2086
    "$X86_BIN" decide -m $m --threads 2 examples/request.json >"$work/q-x86-$i.json"
    for cpu in max,sve=off cortex-a76; do
      # shellcheck disable=SC2086
      qemu "$cpu" "$BIN/clef" decide -m $m --threads 2 examples/request.json >"$work/q-arm-$i.json"
      compare_answers "$work/q-x86-$i.json" "$work/q-arm-$i.json" 1e-3
    done
    echo "  ${m#"$work"/}: baseline hidden states bit-identical; neon-i8mm and cortex-a76 answers within 1e-3 of x86-64"
  done
}

step "arm64 build" build
# Every per-level test at every level: under -cpu max with 128-bit SVE (VL16) qemu offers baseline,
# neon, neon-dotprod, neon-i8mm and sve2-128; sve256 needs 256-bit SVE (VL32).
ops_vl16() {
  ops_at max,sve-default-vector-length=16 "$LEVEL_FILTER:$OPS_EXTRA$OPS_SKIP"
  qemu max,sve-default-vector-length=16 "$BIN/clef_ops_tests" --gtest_filter='*KernelsRunTheLevelsHighwayTarget*' \
    --gtest_brief=1
}
ops_vl32() {  # the sve256 level (every other level and kernel ran at VL16)
  if [[ $FULL -eq 1 ]]; then
    ops_at max,sve-default-vector-length=32 "*/sve256"
  else
    ops_at max,sve-default-vector-length=32 "*/sve256-$SVE256_SLOW"
  fi
}

step "ops VL16" ops_vl16
step "ops VL32" ops_vl32
step "version" version
step "decide" decide
step "quantized" quantized
echo "test_arm64: all steps passed"
