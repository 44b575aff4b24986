#!/usr/bin/env python3
"""Compare the kernels of two PTX files instruction by instruction: a change that must not change
the shipped kernels (a refactoring) compiles them before and after, e.g.

  nvcc -ptx -arch=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -fmad=false
       -I. -Ibuild/generated gpu/cuda/fused/backward.cu -o backward.ptx

and compares the two files.

usage: tools/scripts/compare_ptx.py BEFORE.ptx AFTER.ptx [--strip-template REGEX ...]

Each kernel (.entry) and device function (.func) is keyed by its demangled name (c++filt), with
the parts matched by the --strip-template regexes removed (e.g. a template argument that the
refactoring dropped), so that the same kernel under a new mangled name pairs with its old self.
Its body is normalised: comments, .loc/.file lines and blank lines dropped; every mangled symbol
(_Z...) replaced by its demangled, stripped form (parameter names _param_N keep their N); basic
block labels ($L__BBk_n) lose the function index k. Two comparisons are reported per kernel:
  exact     the normalised bodies, registers as written;
  regs      additionally every register name %rd12 → %rd# (a different register numbering only).
Exit status 0 when every kernel of BEFORE has an exactly identical counterpart in AFTER and vice
versa, 1 otherwise.
"""

import difflib
import re
import subprocess
import sys

MAX_DIFF = 80
MANGLED = re.compile(r"_Z[A-Za-z0-9_]+")


def demangle_all(names):
    names = sorted(set(names))
    if not names:
        return {}
    out = subprocess.run(
        ["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return dict(zip(names, out))


def split_functions(text):
    """[(header line, [body lines])] for each .entry/.func, plus the preamble."""
    lines = text.splitlines()
    funcs, pre, cur = [], [], None
    for ln in lines:
        m = re.match(r"\s*(\.visible\s+|\.weak\s+|\.extern\s+)?(\.entry|\.func)\b", ln)
        if m:
            cur = [ln, []]
            funcs.append(cur)
            continue
        if cur is None:
            pre.append(ln)
        else:
            cur[1].append(ln)
    return pre, funcs


def normalise(lines, dem, strip):
    out = []
    for ln in lines:
        s = ln.split("//", 1)[0].rstrip()
        st = s.strip()
        if not st or st.startswith(".loc") or st.startswith(".file"):
            continue

        def sub(m):
            name = m.group(0)
            pm = re.match(r"(.*?)(_param_\d+)$", name)
            base, tail = (pm.group(1), pm.group(2)) if pm else (name, "")
            d = dem.get(base, base)
            for r in strip:
                d = re.sub(r, "", d)
            return "<" + d + ">" + tail

        s = MANGLED.sub(sub, s)
        s = re.sub(r"\$L__BB\d+_", "$L__BB_", s)
        out.append(s)
    return out


def kernels(path, strip):
    text = open(path).read()
    pre, funcs = split_functions(text)
    dem = demangle_all(
        MANGLED.findall(text) + [re.sub(r"_param_\d+$", "", n) for n in MANGLED.findall(text)]
    )
    res = {"<module declarations outside the functions>": normalise(pre, dem, strip)}
    for header, body in funcs:
        hdr = normalise([header], dem, strip)[0]
        key = re.sub(r"\s*\($", "", hdr.strip())
        res[key] = normalise([header] + body, dem, strip)
    return res


def main():
    args = sys.argv[1:]
    strip = []
    while "--strip-template" in args:
        i = args.index("--strip-template")
        if i + 1 >= len(args):
            print("compare_ptx.py: --strip-template needs a REGEX", file=sys.stderr)
            return 2
        strip.append(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2:
        print(next(x for x in __doc__.splitlines() if x.startswith("usage:")), file=sys.stderr)
        return 2
    before, after = args
    kb, ka = kernels(before, strip), kernels(after, strip)
    ok = True
    print(f"{before}: {len(kb)} functions; {after}: {len(ka)} functions")
    for k in sorted(set(kb) - set(ka)):
        print("only before:", k)
        ok = False
    for k in sorted(set(ka) - set(kb)):
        print("only after: ", k)
        ok = False
    for k in sorted(set(kb) & set(ka)):
        b, a = kb[k], ka[k]
        instr = sum(1 for x in b if not x.strip().startswith((".", "$", "{", "}", ")", "(")))
        if b == a:
            print(f"identical ({len(b)} lines, ~{instr} instructions): {k}")
            continue
        ok = False
        rb = [re.sub(r"%[a-z]+\d+", "%R", x) for x in b]
        ra = [re.sub(r"%[a-z]+\d+", "%R", x) for x in a]
        same_regs = rb == ra
        print(f"DIFFERS ({'only register numbering' if same_regs else 'instructions'}): {k}")
        # The instructions that differ (register names normalised unless that is all that differs).
        db, da = (b, a) if same_regs else (rb, ra)
        diff = list(difflib.unified_diff(db, da, "before", "after", n=1, lineterm=""))
        print(
            f"    {sum(1 for d in diff if d[:1] in '+-' and d[:3] not in ('+++', '---'))} "
            f"lines differ"
        )
        for d in diff[:MAX_DIFF]:
            print("   ", d)
    print("RESULT:", "instruction-identical" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
