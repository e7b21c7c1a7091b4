#!/usr/bin/env python3
"""Doxygen input filter for include/tapegrad/tensor/ops.def: turns the op list
into a page of the API reference, one table row per op (its C++ forms and the
`///` comment above its entry), grouped by the list's sections."""
import re
import sys

FORMS = {
    "FM": ("tg::{n}(const Tensor& self{x})", "self.{n}({y})", True),
    "F": ("tg::{n}(const Tensor& self{x})", None, True),
    "M": (None, "self.{n}({y})", True),
    "IM": (None, "self.{n}({y})", True),
    "FMN": ("tg::{n}(const Tensor& self{x})", "self.{n}({y})", False),
    "FN": ("tg::{n}(const Tensor& self{x})", None, False),
    "MN": (None, "self.{n}({y})", False),
    "MA": (None, "self.{n}({y})", None),
}


# ops.def's Taylor-mode declarations (TG_TAYLOR(id, coverage) under an entry;
# none: covered).
TAYLOR = {"X": "Taylor mode: no rule (refused at the op)", "S": "Taylor mode: a sparse input carries no coefficients"}


def entries(text, kernels=False, taylor=False, complex_=False):
    """("section", title), ("op", entry, doc), with kernels=True
    ("kernel", TG_KERNEL line) for the kernel slots declared under an op,
    with taylor=True ("taylor", id, coverage) for its TG_TAYLOR line, and with
    complex_=True ("complex", id) for its TG_COMPLEX line."""
    doc, section = [], ""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("// ----"):
            section = line.strip("/ -").strip()
            yield ("section", section)
        elif line.startswith("///"):
            doc.append(line[3:].strip())
        elif line.startswith("TG_"):
            body = line
            while body.count("(") > body.count(")"):
                i += 1
                body += " " + lines[i].strip()
            if body.startswith("TG_KERNEL("):
                if kernels:
                    yield ("kernel", body)
            elif body.startswith("TG_COMPLEX("):
                if complex_:
                    yield ("complex", re.match(r"TG_COMPLEX\((.*)\)$", body).group(1).strip())
            elif body.startswith("TG_TAYLOR("):
                if taylor:
                    oid, cov = split_top(re.match(r"TG_TAYLOR\((.*)\)$", body).group(1))
                    yield ("taylor", oid, cov)
            else:
                yield ("op", body, " ".join(doc))
                doc = []
        i += 1


def split_top(s):
    out, depth, cur = [], 0, ""
    for c in s:
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += c in "(<{"
        depth -= c in ")>}"
        cur += c
    out.append(cur.strip())
    return out


def params(p):
    p = re.sub(r"TG_D\((.*?)\)(?=,|$)", r"= \1", p.strip()[1:-1].strip())
    return p


def replace_calls(text, macro, expand):
    """text with each macro(...) call (parentheses balanced) replaced by
    expand(inner), inner the text between its parentheses."""
    out, i = [], 0
    while True:
        j = text.find(macro + "(", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k, depth = j + len(macro), 0
        while True:
            depth += text[k] == "("
            depth -= text[k] == ")"
            if depth == 0:
                break
            k += 1
        out.append(expand(text[j + len(macro) + 1:k]))
        i = k + 1


def binary_entries(text):
    """Each TG_BINARY(...) line of binary.def as the TG_OP entry ops.def makes
    of it (forms G and R), or nothing (form A), with its TG_COMPLEX line when
    its cx column is C."""
    def expand(inner):
        parts = split_top(inner)
        name, arg, form = parts[0], parts[2], parts[3]
        if form not in ("G", "R"):
            return ""
        entry = f"TG_OP(Tensor, {name}, {name}, (const Tensor& {arg}), ({arg}), FM)"
        return entry + (f"\nTG_COMPLEX({name})" if inner.rsplit(",", 1)[1].strip() == "C" else "")
    return replace_calls(text, "TG_BINARY", expand)


def unary_entries(text):
    """Each TG_UNARY(...) line of unary.def as the TG_OP0 entry ops.def makes
    of it, with its TG_COMPLEX line when its cx column is C or A."""
    def expand(inner):
        name = inner.split(",", 1)[0].strip()
        entry = f"TG_OP0(Tensor, {name}, {name}, FM)"
        return entry + (f"\nTG_COMPLEX({name})" if inner.rsplit(",", 1)[1].strip() in ("C", "A") else "")
    return replace_calls(text, "TG_UNARY", expand)


def inline_includes(path):
    """ops.def with the lists it includes (unary.def, binary.def) spliced in; a
    unary.def line becomes the TG_OP0 entry ops.def makes of it, a binary.def
    line of form G or R its TG_OP entry (form A: nothing, ops.def has it),
    each with its TG_COMPLEX line when it takes complex operands."""
    import os
    text = open(path).read()
    def splice(m):
        inc = open(os.path.join(os.path.dirname(path), os.path.basename(m.group(1)))).read()
        inc = "\n".join(l for l in inc.split("\n") if not l.startswith("// "))
        return binary_entries(unary_entries(inc))
    return re.sub(r"#include <(tapegrad/tensor/\w+\.def)>", splice, text)


def linalg_page(text):
    """linalg.def: the linear algebra family's page (tg::linalg)."""
    kinds = {"P": "primitive", "C": "composite"}
    taylor = {"T": "Taylor rule", "X": "no Taylor rule (refused)", "A": "by argument"}
    out = ["/** \\page linalg_ops The linear algebra op list", "",
           "tg::linalg, from include/tapegrad/tensor/linalg.def: torch.linalg's names and semantics, "
           "differentiable to any order in reverse, forward and (where stated) Taylor mode. *primitive*: "
           "its own node and kernels; *composite*: written over the public ops.", "",
           "| op | C++ | kind | Taylor mode | |", "|---|---|---|---|---|"]
    for e in entries(text):
        if e[0] != "op":
            continue
        body, doc = e[1], e[2]
        parts = split_top(re.match(r"TG_LINALG\((.*)\)$", body).group(1))
        ret, name, oid, prm, kind, tay = parts[0], parts[1], parts[2], parts[3], parts[5], parts[6]
        sig = f"`{ret} tg::linalg::{name}({params(prm)})`"
        out.append(f"| `{oid}` | {sig} | {kinds[kind]} | {taylor[tay]} | {doc.replace('|', '/')} |")
    out.append("*/")
    print("\n".join(out))


def dtypes_page(text):
    """dtypes.def: the dtype list's page."""
    out = ["/** \\page dtypes The dtype list", "",
           "Every dtype (tg::ScalarType), from include/tapegrad/tensor/dtypes.def, the one list its names, "
           "promotion, sizes, DLPack codes and kernel dispatch are generated from.", "",
           "| dtype | C++ element type | category | computed in | promotion rank | DLPack code/bits | Python |",
           "|---|---|---|---|---|---|---|"]
    body = "\n".join(l for l in text.split("\n") if not l.startswith("//"))
    for m in re.finditer(r"TG_DTYPE\(([^()]*(?:\([^()]*\)[^()]*)*)\)", body):
        p = [x.strip() for x in split_top(m.group(1))]
        out.append(f"| `k{p[0]}` | `{p[1]}` | {p[3]} | `k{p[4]}` | {p[5]} | {p[6]}/{p[7]} | {p[10]} |")
    out.append("*/")
    print("\n".join(out))


def main():
    if sys.argv[1].endswith("dtypes.def"):
        dtypes_page(open(sys.argv[1]).read())
        return
    if sys.argv[1].endswith("linalg.def"):
        linalg_page(open(sys.argv[1]).read())
        return
    text = inline_includes(sys.argv[1])
    out = ["/** \\page ops The op list", "",
           "Every op of tapegrad, from include/tapegrad/tensor/ops.def. *recorded*: autograd records it "
           "(it has a backward formula, to any order; and a Taylor-mode rule, or is linear, unless the row "
           "says otherwise); *raw*: never recorded. Every op also has a "
           "non-recording form tg::raw::name with the free function's signature.", ""]
    for e in entries(text, taylor=True, complex_=True):
        if e[0] == "complex":  # under its op's row: in that row's status
            assert f"| `{e[1]}` |" in out[-1], f"TG_COMPLEX({e[1]}) is not under its op's entry"
            cells = out[-1].split(" | ")
            cells[2] += "; takes complex"
            out[-1] = " | ".join(cells)
            continue
        if e[0] == "taylor":  # under its op's row: in that row's status
            assert f"| `{e[1]}` |" in out[-1], f"TG_TAYLOR({e[1]}, ...) is not under its op's entry"
            cells = out[-1].split(" | ")
            cells[2] += f"; {TAYLOR[e[2]]}"
            out[-1] = " | ".join(cells)
            continue
        if e[0] == "section":
            out += ["", f"\\section ops_{len(out)} {e[1]}", "",
                    "| op | C++ | | |", "|---|---|---|---|"]
            continue
        body, doc = e[1], e[2]
        kind, inner = re.match(r"TG_(OP0|OP|FN)\((.*)\)$", body).groups()
        parts = split_top(inner)
        ret, name, oid, form = parts[0], parts[1], parts[2], parts[-1]
        free, method, rec = FORMS[form]
        if kind == "FN":
            sig = f"tg::{name}({params(parts[3])})"
            forms = [sig]
        else:
            extras = params(parts[3]) if kind == "OP" else ""
            forms = []
            if free:
                forms.append(free.format(n=name, x=(", " + extras) if extras else ""))
            if method:
                forms.append(method.format(n=name, y=extras))
        status = "accessor" if rec is None else ("recorded" if rec else "raw")
        cxx = "<br>".join(f"`{ret} {f}`" for f in forms)
        out.append(f"| `{oid}` | {cxx} | {status} | {doc.replace('|', '/')} |")
    out.append("*/")
    print("\n".join(out))


if __name__ == "__main__":
    main()
