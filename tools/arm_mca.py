#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Static throughput of ARM64 kernel inner loops with llvm-mca, as a fraction of each core's peak.

For each kernel (a function in a translation unit) the script
  1. compiles the unit to assembly (-S): a clef file with the arm64 build's own flags, read from
     build/arm64/compile_commands.json, or any C/C++ file (a peer's source) with flags you give;
     --march/--mcpu replace the build's -march/-mcpu (Highway files pick their targets by attribute,
     so for them this changes only the tuning of the baseline code);
  2. finds the functions whose (mangled or demangled) name contains every given substring, and in
     them every loop (a label and a later branch back to it); it takes the loop whose own
     instructions (those in no loop nested inside it) do the most multiply-accumulate work, the
     smallest such loop on a tie: normally the innermost loop of the kernel's main path (--loop N
     picks another; --list-loops shows them all). `.inst 0x...` words (inline assembly that spells
     SDOT/SMMLA as raw encodings, as llama.cpp's does) are first disassembled with llvm-mc-19;
  3. runs llvm-mca-19 -mtriple=aarch64 -mcpu=C on the loop for each core C;
  4. prints one row per kernel and core: instructions in the loop, llvm-mca's block reciprocal
     throughput (the resource bound, cycles per iteration), the simulated steady-state cycles per
     iteration (which also sees latency chains), useful multiply-accumulates (MACs) per iteration,
     the core's paper peak in MACs per cycle for the loop's instruction class, and the percentage.

Useful MACs per iteration, unless --macs gives an expression: the sum over the loop's own
instructions of the loop's instruction class (below), with FMLA .4s = 4 (fp32), SDOT/UDOT/USDOT
.4s = 16 (int8), SMMLA/UMMLA/USMMLA = 32 (int8), BFMMLA = 16 and BFDOT .4s = 8 (bf16); SVE forms
scale with the vector length (--sve-bits, default 256: clef's SVE_256 copies). --macs takes
e.g. "sdot*16 + smmla*32" (mnemonic counts in the loop) or a number. A multiply-accumulate is 2
operations in GFLOP/s or GOP/s terms, so the percentage is the same as against ops/peak.h's
measured peaks.

The instruction class (the peak the loop is measured against) is the one with the most MACs in the
loop, or --class; the fp32 FMLAs that scale an int8 kernel's sums are not counted as its work.
% of peak = MACs per iteration / (cycles per iteration x the core's peak MACs per cycle), with the
larger of the two cycle figures. Paper peaks per core (docs/ARM64.md "Peaks per core") are in PEAK_MACS below.

Caveats: llvm-mca assumes every load hits L1 and models no front-end limits beyond dispatch width;
its cortex-a76 CPU uses Cortex-A57's scheduling model, so a76 rows are run with the Neoverse N1
model (N1 is derived from A76; --check-models shows which model each -mcpu gets).

Examples (from the repository root, after cmake --preset arm64 has written compile_commands.json):
  python3 tools/arm_mca.py --check-models
  python3 tools/arm_mca.py --preset peak
  python3 tools/arm_mca.py --preset microgemm
  python3 tools/arm_mca.py --preset clef          # the ARM GEMM kernels (int8, block-quantized, BFMMLA)
  python3 tools/arm_mca.py --preset llama --llama PATH/TO/llama.cpp
  python3 tools/arm_mca.py --tu src/ops/cpu/peak_arm.cc --func sdot_chains --list-loops
  python3 tools/arm_mca.py --src peer.c --flags "-O3 -march=armv8.2-a+dotprod -Iinc" --func my_kernel
Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORES = ("neoverse-v1", "neoverse-v2", "neoverse-n1", "neoverse-n2", "cortex-a76")
# The llvm-mca -mcpu each core is simulated with: LLVM 19 models cortex-a76 with Cortex-A57's
# scheduling model (1 FMLA .4s per cycle, latency 10), not A76's; N1 shares A76's FP/ASIMD pipes.
MCA_CPU = {"cortex-a76": "neoverse-n1"}
# Features each core has, for llvm-mca's assembler (-mattr) and to mark loops a core cannot run.
CORE_FEATURES = {
    "neoverse-v1": {"dotprod", "i8mm", "bf16", "sve"},
    "neoverse-v2": {"dotprod", "i8mm", "bf16", "sve", "sve2"},
    "neoverse-n1": {"dotprod"},
    "neoverse-n2": {"dotprod", "i8mm", "bf16", "sve", "sve2"},
    "cortex-a76": {"dotprod"},
}
# Paper peak, MACs per cycle per core = vector pipes that issue the instruction x MACs per 128-bit
# instruction (docs/ARM64.md "Peaks per core"). V1: 4 x 128-bit FP/ASIMD pipes for FMLA, SDOT,
# SMMLA, BFMMLA, BFDOT (its 256-bit SVE forms issue on 2 of them: the same MACs per cycle). V2: 4 x
# 128-bit. N1, N2, A76: 2 x 128-bit. BFDOT is 8 MACs per instruction, BFMMLA 16.
PEAK_MACS = {
    "neoverse-v1": {"fp32": 16, "sdot": 64, "smmla": 128, "bfmmla": 64, "bfdot": 32},
    "neoverse-v2": {"fp32": 16, "sdot": 64, "smmla": 128, "bfmmla": 64, "bfdot": 32},
    "neoverse-n1": {"fp32": 8, "sdot": 32},
    "neoverse-n2": {"fp32": 8, "sdot": 32, "smmla": 64, "bfmmla": 32, "bfdot": 16},
    "cortex-a76": {"fp32": 8, "sdot": 32},
}
CLASS_FEATURE = {"fp32": None, "sdot": "dotprod", "smmla": "i8mm", "bfmmla": "bf16", "bfdot": "bf16"}
# Instruction -> (class, MACs per 128 bits of result).
MAC_INSTRUCTIONS = {
    "fmla": ("fp32", 4),
    "sdot": ("sdot", 16),
    "udot": ("sdot", 16),
    "usdot": ("sdot", 16),
    "sudot": ("sdot", 16),
    "smmla": ("smmla", 32),
    "ummla": ("smmla", 32),
    "usmmla": ("smmla", 32),
    "bfmmla": ("bfmmla", 16),
    "bfdot": ("bfdot", 8),
}
BRANCHES = re.compile(r"^(b|b\.\w+|b(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)|cbn?z|tbn?z)$")
LABEL = re.compile(r"^([^\s:#]+):")


class KernelError(Exception):
    """A kernel that cannot be analysed (no such function, no loop, a compile error): its row says so."""


def fail(msg: str) -> None:
    sys.exit(f"arm_mca: {msg}")


# ---------------------------------------------------------------------------------------------
# 1. Compiling to assembly


def compile_tu(build: Path, source: Path, march: str | None, mcpu: str | None, out: Path) -> None:
    """`source` (a file of the arm64 build) to assembly with its compile_commands.json flags."""
    db = build / "compile_commands.json"
    if not db.is_file():
        fail(f"{db} not found: run cmake --preset arm64 first (or pass --build)")
    want = source.resolve()
    entries = [e for e in json.loads(db.read_text()) if Path(e["directory"], e["file"]).resolve() == want]
    if not entries:
        fail(f"{source} is not in {db}")
    e = entries[0]
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    if Path(args[0]).name == "ccache":
        args = args[1:]
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a in ("-c", "-MD", "-MMD", "-Werror") or (march and a.startswith("-march=")) or (
            mcpu and a.startswith("-mcpu=")
        ):
            continue
        else:
            kept.append(a)
    kept[-1:] = []  # the source file (last argument), added back below
    if e["file"] not in args:
        fail(f"unexpected compile command for {source}")
    kept = [a for a in kept if a != e["file"]]
    kept += [f"-march={march}"] if march else []
    kept += [f"-mcpu={mcpu}"] if mcpu else []
    run_compiler(kept + ["-S", "-g0", "-o", str(out), e["file"]], cwd=e["directory"])


def compile_src(source: Path, compiler: str | None, flags: str, out: Path) -> None:
    """Any C or C++ file to aarch64 assembly with `flags`."""
    if compiler is None:
        compiler = "aarch64-linux-gnu-gcc-12" if source.suffix == ".c" else "aarch64-linux-gnu-g++-12"
    run_compiler([compiler] + shlex.split(flags) + ["-S", "-g0", "-o", str(out), str(source)], cwd=None)


def run_compiler(cmd: list[str], cwd: str | None) -> None:
    if shutil.which(cmd[0]) is None:
        fail(f"compiler {cmd[0]} not found (scripts/setup.sh --arm64 installs the cross compiler)")
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        print("arm_mca: compile failed:\n  " + " ".join(shlex.quote(c) for c in cmd) + "\n" + r.stderr[-4000:],
              file=sys.stderr)
        raise KernelError("compile failed (above)")


# ---------------------------------------------------------------------------------------------
# 2. Functions and their loops


@dataclasses.dataclass
class Loop:
    function: str
    lines: list[str]  # the label line, then instructions and inner labels, ending in the branch
    instructions: list[str]
    macs: float
    klass: str | None
    nested: int = 0  # loops inside it (their instructions are in `lines` once, not in `instructions`)


def strip_comment(line: str) -> str:
    if line.lstrip().startswith("#"):  # GCC's #APP / #NO_APP around inline assembly
        return ""
    for c in ("//", "@ "):
        i = line.find(c)
        if i >= 0:
            line = line[:i]
    return line.rstrip()


def split_functions(asm: str) -> dict[str, list[str]]:
    """Function name -> its label, instruction and directive lines (GCC or clang -S output)."""
    funcs: dict[str, list[str]] = {}
    declared = set(re.findall(r"^\s*\.type\s+([^,\s]+)\s*,\s*[%@]function", asm, re.M))
    current = None
    for raw in asm.splitlines():
        line = strip_comment(raw)
        if not line.strip():
            continue
        m = LABEL.match(line)
        if m and m.group(1) in declared:
            current = m.group(1)
            funcs[current] = []
            continue
        if current is None:
            continue
        if re.match(r"^\s*\.size\s+" + re.escape(current) + r"\s*,", line):
            current = None
            continue
        m = LABEL.match(line.strip())
        if m and line.strip()[m.end() :].strip():  # "1: ldr q0, [x1]" (inline assembly): two lines
            funcs[current] += [m.group(0), "\t" + line.strip()[m.end() :].strip()]
        else:
            funcs[current].append(line)
    return funcs


def mnemonic(line: str) -> str:
    return line.split(None, 1)[0].lower() if line.strip() else ""


def is_instruction(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith(".") and not LABEL.match(s)


def instruction_macs(line: str, sve_bits: int) -> tuple[str | None, float]:
    """(class, MACs) of one instruction; (None, 0) when it does no useful multiply-accumulate."""
    parts = line.strip().split(None, 1)
    name = parts[0].lower()
    if name not in MAC_INSTRUCTIONS or len(parts) < 2:
        return None, 0.0
    klass, per128 = MAC_INSTRUCTIONS[name]
    dest = parts[1].split(",")[0].strip().lower()
    if dest.startswith("z"):  # SVE: the vector length decides
        if klass == "fp32" and not dest.endswith(".s"):
            return None, 0.0
        return klass, per128 * sve_bits / 128
    if klass == "fp32":  # NEON fp32 only: .4s full, .2s half (fp16 .8h and fp64 .2d are other classes)
        return ("fp32", 4.0) if dest.endswith(".4s") else ("fp32", 2.0) if dest.endswith(".2s") else (None, 0.0)
    if dest.endswith(".2s"):  # 64-bit forms of the dot products
        return klass, per128 / 2
    return klass, float(per128)


def loop_candidates(name: str, lines: list[str], sve_bits: int) -> list[Loop]:
    """Every loop (a label and a later branch back to it) of one function, with the MACs of its own
    instructions: those in no loop nested inside it. Usually the hot loop is innermost; when it holds
    a small nested loop of its own (unpacking scales, say), it is still the one with the MACs."""
    labels: dict[str, list[int]] = {}  # numeric local labels ("1:", inline assembly) repeat
    for i, line in enumerate(lines):
        m = LABEL.match(line.strip())
        if m:
            labels.setdefault(m.group(1), []).append(i)
    spans = set()
    for i, line in enumerate(lines):
        if not is_instruction(line) or not BRANCHES.match(mnemonic(line)):
            continue
        target = line.strip().split(None, 1)[1].split(",")[-1].strip()
        numeric = re.fullmatch(r"(\d+)b", target)
        before = [j for j in labels.get(numeric.group(1) if numeric else target, []) if j < i]
        if before and (numeric or len(labels[target]) == 1):
            spans.add((before[-1], i))
    loops = []
    for a, b in sorted(spans):
        nested = [o for o in spans if o != (a, b) and a <= o[0] and o[1] <= b]
        own = [i for i in range(a, b + 1) if is_instruction(lines[i]) and not any(x <= i <= y for x, y in nested)]
        per_class: dict[str, float] = {}
        for i in own:
            k, m = instruction_macs(lines[i], sve_bits)
            if k:
                per_class[k] = per_class.get(k, 0.0) + m
        klass = max(per_class, key=per_class.get) if per_class else None
        body = ["\t" + x.strip() if is_instruction(x) else x.strip() for x in lines[a : b + 1]]
        macs = per_class[klass] if klass else 0.0  # the dominant class only (not the scales' fp32 FMAs)
        loops.append(Loop(name, body, [lines[i].strip() for i in own], macs, klass, len(nested)))
    return loops


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt") or shutil.which("aarch64-linux-gnu-c++filt")
    if not tool or not names:
        return {n: n for n in names}
    r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    out = r.stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


INST = re.compile(r"^(\s*)\.inst\s+(0x[0-9a-fA-F]{1,8})\s*(//.*)?$", re.M)


def decode_inst_words(asm: str) -> str:
    """`.inst 0x...` lines (inline assembly that spells SDOT/SMMLA as raw words for old assemblers, as
    llama.cpp's does) replaced by the instruction, via llvm-mc-19's disassembler, so that llvm-mca
    schedules them and the MAC count sees them. Words it cannot decode stay (llvm-mca skips them)."""
    words = sorted({int(m.group(2), 16) for m in INST.finditer(asm)})
    tool = shutil.which("llvm-mc-19")
    if not words or tool is None:
        return asm
    def disassemble(ws: list[int]) -> list[str] | None:
        data = " ".join(f"0x{(w >> (8 * i)) & 0xFF:02x}" for w in ws for i in range(4))
        r = subprocess.run([tool, "--disassemble", "-triple=aarch64", "-mattr=+neon,+fullfp16,+dotprod,+i8mm,+bf16,"
                            "+sve,+sve2"], input=data, capture_output=True, text=True)
        out = [x.strip() for x in r.stdout.splitlines() if x.strip() and not x.strip().startswith(".")]
        return out if r.returncode == 0 and len(out) == len(ws) and not r.stderr.strip() else None

    text: dict[int, str] = {}
    batch = disassemble(words)
    if batch is not None:
        text = dict(zip(words, batch))
    else:  # some word does not decode: one call per word keeps the mapping exact
        for w in words:
            one = disassemble([w])
            if one:
                text[w] = one[0]
    return INST.sub(lambda m: m.group(1) + text.get(int(m.group(2), 16), m.group(0).strip()), asm)


def find_loops(asm: str, substrings: list[str], sve_bits: int) -> list[Loop]:
    funcs = split_functions(decode_inst_words(asm))
    pretty = demangle(list(funcs))
    chosen = [f for f in funcs if all(s in f or s in pretty[f] for s in substrings)]
    if not chosen:
        raise KernelError(f"no function matches {' & '.join(substrings)}")
    loops = []
    for f in chosen:
        loops += loop_candidates(f, funcs[f], sve_bits)
    if not loops:
        raise KernelError(f"no loop in {', '.join(chosen)} (a build whose #if picks no loop?)")
    return sorted(loops, key=lambda lp: (-lp.macs, lp.nested, len(lp.instructions)))


# ---------------------------------------------------------------------------------------------
# 3. llvm-mca


def llvm_mca() -> str:
    tool = shutil.which("llvm-mca-19")
    if tool is None:
        fail("llvm-mca-19 not found: apt-get install -y --no-install-recommends llvm-19 "
             "(llvm-mca-14 has no Neoverse models)")
    return tool


def mattr(core: str) -> str:
    f = CORE_FEATURES[core]
    attrs = ["+neon", "+fullfp16"] + [f"+{x}" for x in sorted(f)]
    return ",".join(attrs)


def run_mca(body: str, core: str, iterations: int) -> dict:
    """llvm-mca's summary of `body` on `core`: instructions, rthroughput, cycles per iteration, model."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(body + "\n")
        path = f.name
    try:
        cpu = MCA_CPU.get(core, core)
        cmd = [llvm_mca(), "-mtriple=aarch64", f"-mcpu={cpu}", f"-mattr={mattr(core)}", "-instruction-info=0"]
        out = {}
        for n in (iterations, 2 * iterations):
            r = subprocess.run(cmd + [f"-iterations={n}", path], capture_output=True, text=True)
            if r.returncode != 0:
                need = re.search(r"instruction requires: ([\w\s-]+)", r.stderr)
                return {"error": f"needs {need.group(1).strip()}" if need else r.stderr.strip().splitlines()[0]}
            out[n] = r.stdout
        total = {n: int(re.search(r"Total Cycles:\s+(\d+)", t).group(1)) for n, t in out.items()}
        text = out[iterations]
        units = re.findall(r"^\[[\d.]+\]\s+-\s+(\w+?)Unit", text, re.M)
        return {
            "instructions": int(re.search(r"Instructions:\s+(\d+)", text).group(1)) // iterations,
            "rthroughput": float(re.search(r"Block RThroughput:\s+([\d.]+)", text).group(1)),
            # Steady state: the extra cycles of `iterations` more iterations (no pipeline fill).
            "cycles": (total[2 * iterations] - total[iterations]) / iterations,
            "model": units[0] if units else "?",
        }
    finally:
        os.unlink(path)


def check_models() -> None:
    """Which scheduling model llvm-mca-19 uses for each -mcpu, and its 8 independent FMLA .4s."""
    body = "\n".join(f"\tfmla v{i}.4s, v30.4s, v31.4s" for i in range(8))
    print("llvm-mca-19 scheduling models (8 independent FMLA .4s; a 4-pipe core: 2.0 cycles, 2-pipe: 4.0)")
    print(f"  {'-mcpu':<14} {'model units':<12} {'RThroughput':>11}")
    for cpu in CORES:
        saved = MCA_CPU.pop(cpu, None)
        r = run_mca(body, cpu, 100)
        if saved:
            MCA_CPU[cpu] = saved
        real = r["model"].lower() in cpu.replace("neoverse-", "").replace("cortex-", "")
        note = "" if real else f"  (not {cpu}'s own model" + (f"; this tool uses {saved}'s)" if saved else ")")
        print(f"  {cpu:<14} {r['model']:<12} {r['rthroughput']:>11.2f}{note}")


# ---------------------------------------------------------------------------------------------
# 4. The table


SAFE_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def eval_macs(expr: str, loop: Loop) -> float:
    """`expr` with each mnemonic replaced by its count in the loop: "sdot*16 + smmla*32", "64"."""
    counts: dict[str, int] = {}
    for x in loop.instructions:
        counts[mnemonic(x)] = counts.get(mnemonic(x), 0) + 1

    def ev(n: ast.AST) -> float:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            return float(n.value)
        if isinstance(n, ast.Name):
            return float(counts.get(n.id.lower(), 0))
        if isinstance(n, ast.BinOp) and type(n.op) in SAFE_OPS:
            return SAFE_OPS[type(n.op)](ev(n.left), ev(n.right))
        fail(f"--macs: only numbers, mnemonics and + - * / ({expr!r})")
        return 0.0

    return ev(ast.parse(expr, mode="eval"))


@dataclasses.dataclass
class Kernel:
    label: str
    funcs: list[str]
    tu: str | None = None  # a file of the arm64 build (compile_commands.json)
    src: str | None = None  # or any file, compiled with `flags`
    flags: str = ""
    macs: str | None = None
    klass: str | None = None
    cores: tuple[str, ...] | None = None  # only these cores (an SVE_256 copy runs on V1 only)
    sve_bits: int | None = None  # the SVE vector length of its MAC count (default --sve-bits)


def loop_of(k: Kernel, args, asm_cache: dict) -> tuple[Loop, list[Loop]]:
    key = (k.tu, k.src, k.flags)
    if key not in asm_cache:
        out = Path(tempfile.mkdtemp(prefix="arm_mca.")) / "out.s"
        if k.tu:
            tu = Path(k.tu) if Path(k.tu).is_absolute() else ROOT / k.tu
            compile_tu(args.build, tu, args.march, args.mcpu, out)
        else:
            compile_src(Path(k.src), args.cc, k.flags, out)
        asm_cache[key] = out.read_text()
        if args.keep_asm:
            print(f"[{k.label}] assembly: {out}", file=sys.stderr)
    loops = find_loops(asm_cache[key], k.funcs, k.sve_bits or args.sve_bits)
    if args.loop >= len(loops):
        raise KernelError(f"--loop {args.loop}, but only {len(loops)} loops")
    return loops[args.loop], loops


def kernel_rows(k: Kernel, args, asm_cache: dict) -> list[list[str]]:
    loop, loops = loop_of(k, args, asm_cache)
    if args.list_loops:
        for i, lp in enumerate(loops):
            print(f"--- {k.label}: loop {i} in {lp.function}: {len(lp.instructions)} own instructions, "
                  f"{lp.nested} nested loops, {lp.macs:g} MACs")
            print("\n".join(lp.lines))
    if args.show_loop:
        print(f"--- {k.label}: {loop.function}\n" + "\n".join(loop.lines))
    macs = eval_macs(k.macs, loop) if k.macs else loop.macs
    klass = k.klass or loop.klass or "fp32"
    rows = []
    which = f"{args.loop}/{len(loops)}" + (f" ({loop.nested} nested)" if loop.nested else "")
    for core in [c for c in args.cores if k.cores is None or c in k.cores]:
        feat = CLASS_FEATURE[klass]
        if feat and feat not in CORE_FEATURES[core]:
            rows.append([k.label, which, core, "", "", "", "", klass, f"{macs:g}", "-", f"n/a: no {feat}"])
            continue
        r = run_mca("\n".join(loop.lines), core, args.iterations)
        if "error" in r:
            rows.append([k.label, which, core, "", "", "", "", klass, f"{macs:g}", "-", r["error"]])
            continue
        peak = PEAK_MACS[core][klass]
        cyc = max(r["cycles"], r["rthroughput"])
        pct = 100.0 * macs / (cyc * peak) if cyc > 0 else 0.0
        model = r["model"] + ("*" if core in MCA_CPU else "")
        rows.append([k.label, which, core, model, str(r["instructions"]), f"{r['rthroughput']:.2f}",
                     f"{r['cycles']:.2f}",
                     klass, f"{macs:g}", str(peak), f"{pct:.0f}%"])
    return rows


def print_table(rows: list[list[str]]) -> None:
    head = ["kernel", "loop", "core", "model", "insts", "RThru c/it", "sim c/it", "class", "MACs/it", "peak MAC/c",
            "% peak"]
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    left = (0, 1, 2, 3, 7)
    fmt = lambda r: "  ".join(str(c).ljust(w[i]) if i in left else str(c).rjust(w[i]) for i, c in enumerate(r))
    print(fmt(head))
    print("  ".join("-" * x for x in w))
    last = None
    for r in rows:
        if last is not None and r[0] != last:
            print()
        print(fmt(r))
        last = r[0]
    print("loop: the loop analysed / loops in the matching functions (--loop, --list-loops); (N nested): it holds N")
    print("      inner loops, which llvm-mca sees once per iteration and the MAC count leaves out")
    if any(r[2] in MCA_CPU for r in rows):
        print("\n* cortex-a76: simulated with the Neoverse N1 model (llvm-mca-19's cortex-a76 is Cortex-A57's model)")
    print("% peak = MACs per iteration / (max(RThru, sim) cycles per iteration x the core's peak MACs per cycle)")


# ---------------------------------------------------------------------------------------------
# Presets: the kernels this project compares


def presets(name: str, llama: Path | None) -> list[Kernel]:
    if name == "peak":  # ops/peak.h measure_arm_peak's chain loops: ~100% of peak validates the tool
        tu = "src/ops/cpu/peak_arm.cc"
        return [Kernel(f"peak {f}", [f"{f}_chains"], tu=tu) for f in ("fmla", "sdot", "smmla", "bfmmla")]
    if name == "microgemm":
        # The Highway small-GEMM register tile (cpu/microgemm-inl.h, up to 6 rows x 2 vectors), inlined
        # into the delta rule's chunk (gdn.cc) and attention: the loops with the most FMLAs there. The
        # SVE_256 copy runs on 256-bit SVE cores only (V1), the SVE2_128 copy on V2 and N2.
        gdn, att = "src/ops/cpu/gdn.cc", "src/ops/cpu/attention.cc"
        return [
            Kernel("microgemm NEON (gdn.cc)", ["N_NEON", "run_chunk"], tu=gdn),
            Kernel("microgemm SVE_256 (gdn.cc)", ["N_SVE_256", "run_chunk"], tu=gdn, cores=("neoverse-v1",)),
            Kernel("microgemm SVE2_128 (gdn.cc)", ["N_SVE2_128", "run_chunk"], tu=gdn,
                   cores=("neoverse-v2", "neoverse-n2"), sve_bits=128),
            Kernel("microgemm NEON (attention.cc)", ["N_NEON", "attention_impl"], tu=att),
        ]
    if name == "clef":
        # The ARM GEMM kernels (docs/ARM64.md "Levels"): the register tile of each, one block of k
        # per loop iteration (32 k for int8 and the block types, 4 k for BFMMLA). The block-quantized
        # kernels' tile reads a panel unpacked once per call (not in the loop); "joint" is every
        # type whose half-blocks share a scale (Q4_K, Q5_K, Q4_0, Q4_1, Q5_0, Q5_1), "split" Q6_K.
        i8, qg, bf = "src/ops/cpu/int8_gemm.cc", "src/ops/cpu/quant_gemm.cc", "src/ops/cpu/bf16_gemm_arm.cc"
        return [
            Kernel("clef Q8_0/int8 SDOT 4x8", ["tile_neon_dot", "ILi4ELi2"], tu=i8, klass="sdot"),
            Kernel("clef Q8_0/int8 SMMLA 4x8", ["tile_neon_i8mm", "ILi4"], tu=i8, klass="smmla"),
            Kernel("clef K-quant joint SDOT 4x8", ["quant_tile_dot", "ILi4ELb0"], tu=qg, klass="sdot"),
            Kernel("clef Q6_K split SDOT 4x8", ["quant_tile_dot", "ILi4ELb1"], tu=qg, klass="sdot"),
            Kernel("clef K-quant joint SMMLA 4x16", ["quant_tile_i8mm", "ILi4ELb0"], tu=qg, klass="smmla"),
            Kernel("clef Q6_K split SMMLA 4x16", ["quant_tile_i8mm", "ILi4ELb1"], tu=qg, klass="smmla"),
            Kernel("clef bf16 BFMMLA 6x16", ["tile", "ILi3"], tu=bf, klass="bfmmla"),
        ]
    if name == "llama":
        if llama is None or not (llama / "ggml/src/ggml-cpu/arch/arm").is_dir():
            fail("--preset llama needs --llama DIR, a llama.cpp checkout (ggml/src/ggml-cpu/arch/arm/)")
        g = llama / "ggml"
        inc = f"-I{g}/include -I{g}/src -I{g}/src/ggml-cpu -DNDEBUG -D_GNU_SOURCE -O3"
        quants, repack = str(g / "src/ggml-cpu/arch/arm/quants.c"), str(g / "src/ggml-cpu/arch/arm/repack.cpp")
        dot, mm = "-march=armv8.2-a+dotprod", "-march=armv8.2-a+dotprod+i8mm"
        return [
            Kernel("llama vec_dot_q8_0_q8_0", ["ggml_vec_dot_q8_0_q8_0"], src=quants, flags=f"{inc} -std=c11 {dot}"),
            Kernel("llama vec_dot_q4_K_q8_K", ["ggml_vec_dot_q4_K_q8_K"], src=quants, flags=f"{inc} -std=c11 {dot}"),
            Kernel("llama gemm_q4_0_4x4_q8_0", ["ggml_gemm_q4_0_4x4_q8_0"], src=repack,
                   flags=f"{inc} -std=c++17 {dot}"),
            Kernel("llama gemm_q4_0_4x8_q8_0", ["ggml_gemm_q4_0_4x8_q8_0"], src=repack, flags=f"{inc} -std=c++17 {mm}"),
            # Its only ARM path is 256-bit SVE with I8MM (Neoverse V1); elsewhere it runs the generic C.
            Kernel("llama gemm_q4_0_8x8_q8_0 (SVE)", ["ggml_gemm_q4_0_8x8_q8_0"], src=repack,
                   flags=f"{inc} -std=c++17 {mm}+sve", cores=("neoverse-v1",), sve_bits=256),
            Kernel("llama gemm_q4_K_8x4_q8_K", ["ggml_gemm_q4_K_8x4_q8_K"], src=repack,
                   flags=f"{inc} -std=c++17 {dot}"),
            Kernel("llama gemm_q4_K_8x8_q8_K", ["ggml_gemm_q4_K_8x8_q8_K"], src=repack, flags=f"{inc} -std=c++17 {mm}"),
        ]
    fail(f"unknown preset {name} (peak, microgemm, clef, llama)")
    return []


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
    what = ap.add_argument_group("what to analyse (a preset, or one kernel)")
    what.add_argument("--preset", action="append", default=[], help="peak, microgemm, clef or llama (repeatable)")
    what.add_argument("--llama", type=Path, help="llama.cpp checkout for --preset llama")
    what.add_argument("--tu", help="a source file of the arm64 build, compiled with its compile_commands.json flags")
    what.add_argument("--src", help="any C/C++ file, compiled with --flags")
    what.add_argument("--flags", default="-O3", help="compiler flags for --src (include -march=...)")
    what.add_argument("--cc", help="compiler for --src (default aarch64-linux-gnu-gcc-12 / g++-12 by suffix)")
    what.add_argument("--func", action="append", default=[],
                      help="substring of the function's mangled or demangled name (repeat: all must match)")
    what.add_argument("--label", help="the kernel's name in the table (default: the --func substrings)")
    what.add_argument("--macs", help='useful MACs per loop iteration: a number or e.g. "sdot*16 + smmla*32"')
    what.add_argument("--class", dest="klass", choices=sorted(CLASS_FEATURE), help="the peak to compare with")
    how = ap.add_argument_group("how")
    how.add_argument("--build", type=Path, default=ROOT / "build/arm64", help="build folder with compile_commands.json")
    how.add_argument("--march", help="replaces -march for --tu (e.g. armv8.2-a+dotprod)")
    how.add_argument("--mcpu", help="adds -mcpu for --tu (tuning, e.g. neoverse-v1)")
    how.add_argument("--cores", default=",".join(CORES), help="comma-separated cores (default: %(default)s)")
    how.add_argument("--sve-bits", type=int, default=256, help="SVE vector length for the MAC count")
    how.add_argument("--iterations", type=int, default=200, help="llvm-mca iterations (the run doubles them)")
    how.add_argument("--loop", type=int, default=0, help="take the N-th loop by MACs (0: the most)")
    how.add_argument("--list-loops", action="store_true", help="print every loop found, in --loop order")
    how.add_argument("--show-loop", action="store_true", help="print the loop analysed")
    how.add_argument("--keep-asm", action="store_true", help="keep the .s files and print their paths")
    how.add_argument("--check-models", action="store_true", help="which scheduling model each core gets, then exit")
    args = ap.parse_args(argv)
    args.cores = [c for c in args.cores.split(",") if c]
    bad = [c for c in args.cores if c not in CORES]
    if bad:
        ap.error(f"unknown core {', '.join(bad)} (known: {', '.join(CORES)})")
    if not args.check_models and not args.preset and not args.func:
        ap.error("give --preset, or --tu/--src with --func")
    if args.func and not (args.tu or args.src):
        ap.error("--func needs --tu or --src")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.check_models:
        check_models()
        return 0
    kernels = [k for p in args.preset for k in presets(p, args.llama)]
    if args.func:
        kernels.append(Kernel(args.label or " & ".join(args.func), args.func, tu=args.tu, src=args.src,
                              flags=args.flags, macs=args.macs, klass=args.klass))
    rows: list[list[str]] = []
    cache: dict = {}
    for k in kernels:
        try:
            rows += kernel_rows(k, args, cache)
        except KernelError as e:
            rows.append([k.label, "", "", "", "", "", "", "", "", "", f"not analysed: {e}"])
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
