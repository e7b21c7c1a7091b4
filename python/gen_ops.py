#!/usr/bin/env python3
"""Writes the Python bindings of every op of tapegrad's op lists.

    gen_ops.py OPS_TXT INCLUDE_DIR OUT_INC OUT_MANIFEST

OPS_TXT is python/op_list.cpp through the C preprocessor (one line per op,
nested entries expanded); INCLUDE_DIR holds include/tapegrad/tensor/*.def,
read for the `///` comments above each entry (the docstrings). OUT_INC is
C++ included by python/tapegrad_module.cpp: one pybind11 binding per op and
overload, a module function for the free forms (tapegrad.linalg for the
linalg list) and a Tensor method for the method forms, with the C++
parameter names and defaults. OUT_MANIFEST (JSON) lists what was bound and
what was left out with the reason, for the tests (python/tests) to hold the
bindings to the lists. Bound by hand instead (python/tapegrad_module.cpp):
the autograd accessors (form MA: properties and hooks there).
"""
import json
import re
import sys

# Parameter types the bindings take (pybind11's casters, and the module's
# for IntList, Scalar, ScalarType and Device); an op with any other is left
# out, with the type as the reason.
TAKEN = {
    "const Tensor&", "const IntList&", "int64_t", "int", "bool", "Scalar", "double", "const std::string&",
    "std::optional<int64_t>", "std::optional<Scalar>", "std::optional<bool>", "std::optional<double>",
    "const std::vector<Tensor>&", "const std::vector<double>&", "Device", "ScalarType",
}
RETURNS = {"Tensor", "TensorPair", "TensorTriple", "TensorQuad", "std::vector<Tensor>", "bool", "const Tensor&",
           "Tensor&"}


def split_top(s):
    """s split at the commas outside (), <>, {} and string literals."""
    out, cur, depth, quote = [], "", 0, False
    for ch in s:
        if ch == '"':
            quote = not quote
        if not quote:
            if ch in "(<{":
                depth += 1
            elif ch in ")>}":
                depth -= 1
            elif ch == "," and depth == 0:
                out.append(cur.strip())
                cur = ""
                continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def unquote(s):
    s = s.strip()
    assert s.startswith('"') and s.endswith('"'), s
    return bytes(s[1:-1], "utf-8").decode("unicode_escape")


def parse_param(p):
    """(type, name, default or None) of 'const IntList& stride TG_D({1})'."""
    default = None
    m = re.search(r"\s*TG_D\((.*)\)\s*$", p)
    if m:
        default = m.group(1).strip()
        p = p[: m.start()].strip()
    m = re.match(r"^(.*?)(\w+)$", p)
    return m.group(1).strip(), m.group(2), default


def parse_ops(text):
    ops = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("TG"):
            continue
        parts = line.split(" | ")
        kind = parts[0].strip()
        op = {"kind": kind, "ret": unquote(parts[1]), "name": unquote(parts[2]), "id": unquote(parts[3])}
        if kind == "TGOP0":
            op["params"], op["form"] = [], unquote(parts[4])
        else:
            params = unquote(parts[4]).strip()[1:-1]
            op["params"] = [parse_param(p) for p in split_top(params)]
            op["form"] = unquote(parts[6])
        ops.append(op)
    return ops


def parse_docs(include_dir):
    """id -> docstring, from the /// lines above each entry, and the unary
    and binary lists' formulas."""
    docs = {}
    base = include_dir + "/tapegrad/tensor/"
    for f in ["ops.def", "grid.def", "linalg.def"]:
        pending = []
        for line in open(base + f):
            s = line.strip()
            if s.startswith("///"):
                pending.append(s[3:].strip())
                continue
            m = re.match(r"^TG_(OP0|OP|FN|GRID|LINALG)\(\s*[^,]+,\s*(\w+),\s*(\w+)", s)
            if m and pending:
                docs[m.group(3)] = " ".join(pending)
            if not s.startswith("TG_TAYLOR") and not s.startswith("TG_COMPLEX") and not s.startswith("TG_KERNEL"):
                pending = []
    for f, what in [("unary.def", "Elementwise: "), ("binary.def", "Elementwise, broadcasting: ")]:
        for line in open(base + f):
            m = re.match(r"^TG_(UNARY|BINARY)\((.*)\)\s*$", line.strip())
            if not m:
                continue
            cols = split_top(m.group(2))
            formula = cols[3] if m.group(1) == "UNARY" else cols[5]
            docs.setdefault(cols[0], what + formula.strip())
    return docs


def cpp_default(t, d):
    """The py::arg default of a parameter of type t written TG_D(d)."""
    if t == "const Tensor&" or t.startswith("std::optional"):
        if d in ("{}", "std::nullopt"):
            return "py::none()"
        return "%s{%s}" % (t, d)
    if d.startswith("{"):  # a braced list: IntList{1}, IntList{}
        return base_type(t) + d
    return "%s{%s}" % (base_type(t), d)


def base_type(t):
    return re.sub(r"^const\s+|\s*&$", "", t)


def lambda_param(t, n, d):
    """The lambda's parameter: an optional Tensor where the op's default is
    the undefined tensor (None in Python)."""
    if t == "const Tensor&" and d is not None:
        return "const std::optional<Tensor>& " + n
    return t + " " + n


def call_arg(t, n, d):
    if t == "const Tensor&" and d is not None:
        return "(%s ? *%s : Tensor())" % (n, n)
    return n


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    ops_txt, include_dir, out_inc, out_manifest = sys.argv[1:5]
    ops = parse_ops(open(ops_txt).read())
    docs = parse_docs(include_dir)
    lines = ["// Generated by python/gen_ops.py from the op lists (include/tapegrad/tensor/*.def); do not edit.",
             "// One binding per op and overload: module functions, tapegrad.linalg's, Tensor methods.",
             "void bind_generated_ops(py::module_& m, py::module_& linalg, py::class_<Tensor>& cls) {"]
    manifest = {"functions": [], "linalg": [], "methods": [], "left_out": []}
    for op in ops:
        name, form, ret = op["name"], op["form"], op["ret"]
        bad = [t for t, _, _ in op["params"] if t not in TAKEN]
        if form == "MA":
            manifest["left_out"].append([op["id"], "an autograd accessor (bound by hand)"])
            continue
        if bad or ret not in RETURNS:
            manifest["left_out"].append([op["id"], "type " + (bad[0] if bad else ret)])
            continue
        doc = c_string(docs.get(op["id"], docs.get(name, "tg::" + name + " (include/tapegrad/tensor/ops.def)")))
        params = op["params"]
        lparams = ", ".join(lambda_param(t, n, d) for t, n, d in params)
        cargs = ", ".join(call_arg(t, n, d) for t, n, d in params)
        pyargs = "".join(
            ", py::arg(%s)%s" % (c_string(n), "" if d is None else " = " + cpp_default(t, d)) for t, n, d in params)
        kind = op["kind"]
        in_place = form == "IM"
        rtype = "Tensor" if ret in ("const Tensor&", "Tensor&") else ret
        free = kind in ("TGFN", "TGGRID", "TGLINALG") or form in ("FM", "F", "FMN", "FN")
        method = kind in ("TGOP", "TGOP0") and form in ("FM", "M", "IM", "FMN", "MN")
        if free:
            if kind in ("TGOP", "TGOP0"):
                sig = "const Tensor& input" + (", " + lparams if lparams else "")
                call = "tg::%s(input%s)" % (name, ", " + cargs if cargs else "")
                args = ', py::arg("input")' + pyargs
            else:
                sig, args = lparams, pyargs
                call = "tg::%s%s(%s)" % ("linalg::" if kind == "TGLINALG" else "", name, cargs)
            target = "linalg" if kind == "TGLINALG" else "m"
            lines.append("  %s.def(%s, [](%s) -> %s { return %s; }%s, %s);" %
                         (target, c_string(name), sig, rtype, call, args, doc))
            manifest["linalg" if kind == "TGLINALG" else "functions"].append(name)
        if method:
            if in_place:  # the same Python object back, as PyTorch's in-place methods
                lines.append(
                    "  cls.def(%s, [](Tensor& self%s) -> Tensor& { self.%s(%s); return self; }%s, "
                    "py::return_value_policy::reference, %s);" %
                    (c_string(name), ", " + lparams if lparams else "", name, cargs, pyargs, doc))
            else:
                lines.append("  cls.def(%s, [](const Tensor& self%s) -> %s { return self.%s(%s); }%s, %s);" %
                             (c_string(name), ", " + lparams if lparams else "", rtype, name, cargs, pyargs, doc))
            manifest["methods"].append(name)
    lines.append("}")
    for k in ("functions", "linalg", "methods"):
        manifest[k] = sorted(set(manifest[k]))
    open(out_inc, "w").write("\n".join(lines) + "\n")
    json.dump(manifest, open(out_manifest, "w"), indent=1)


if __name__ == "__main__":
    main()
