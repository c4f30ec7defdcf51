#!/usr/bin/env python3
"""Keeps tests/abi/nvml_abi_check.cpp complete.

The ABI check's lists are written by hand; this test fails when nvml_types.hpp declares a type,
constant, struct or field that the lists do not check, or a struct whose fields differ in name or
order from nvml.h's (a field nvml.h has and tarmac lacks could hide in padding, where no offset or
size check would see it). It also asserts that the functions the check declares by hand as newer
than the header are really absent from it.

usage: check_coverage.py NVML_TYPES_HPP ABI_CHECK_CPP [NVML_H]
"""
import re
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_top_level(body):
    """Splits a struct body at the semicolons that are not inside nested braces."""
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == ";" and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    return [p for p in parts if p]


def fields_of(body, prefix=""):
    """Field paths of a struct body in declaration order; nested structs give a.b paths."""
    out = []
    for decl in split_top_level(body):
        nested = re.match(r"struct\s*\w*\s*\{(.*)\}\s*(\w+)\s*$", decl, re.S)
        if nested:
            name = prefix + nested.group(2)
            out.append(name)
            out += fields_of(nested.group(1), name + ".")
            continue
        m = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", decl)
        if not m:
            raise SystemExit(f"cannot parse field declaration: {decl!r}")
        out.append(prefix + m.group(1))
    return out


def matching_open_brace(text, close):
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == "}":
            depth += 1
        elif text[i] == "{":
            depth -= 1
            if depth == 0:
                return i
    raise SystemExit("unbalanced braces")


def tarmac_structs(text):
    structs = {}
    for m in re.finditer(r"^struct\s+(\w+)\s*\{", text, re.M):
        start = m.end()
        depth, i = 1, start
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        structs[m.group(1)] = fields_of(text[start : i - 1])
    return structs


def nvml_struct(text, name):
    m = re.search(r"\}\s*" + re.escape(name) + r"\s*;", text)
    if not m:
        return None
    close = m.start()
    return fields_of(text[matching_open_brace(text, close) + 1 : close])


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    types_hpp = strip_comments(open(sys.argv[1]).read())
    check_cpp = open(sys.argv[2]).read()
    nvml_h = strip_comments(open(sys.argv[3]).read()) if len(sys.argv) == 4 else None

    problems = []
    types = re.findall(r"^using\s+(\w+)\s*=", types_hpp, re.M)
    constants = re.findall(r"^inline\s+constexpr\s+[\w\s]+?\b(\w+)\s*=", types_hpp, re.M)
    structs = tarmac_structs(types_hpp)

    for t in types:
        if not re.search(r"\bT\(" + t + r"\)", check_cpp):
            problems.append(f"type {t} has no T({t}) line in the ABI check")
    for c in constants:
        if not re.search(r"\b(C\(" + c + r"\)|R\(" + c + r",|NC\(" + c + r",)", check_cpp):
            problems.append(f"constant {c} has no C({c}) or R({c}, ...) line in the ABI check")
    # Structs newer than the header: pinned by NS/NF lines to NVIDIA's documented layout instead.
    newer_structs = set(re.findall(r"\bNS\((\w+),", check_cpp))
    n_fields = 0
    for s, fields in structs.items():
        newer_struct = s in newer_structs
        if not newer_struct and not re.search(r"\bS\(" + s + r"\)", check_cpp):
            problems.append(f"struct {s} has no S({s}) line in the ABI check")
        for f in fields:
            n_fields += 1
            pattern = (r"\bNF\(" + s + r",\s*" + re.escape(f) + r",") if newer_struct else (
                r"\bF\(" + s + r",\s*" + re.escape(f) + r"\)")
            if not re.search(pattern, check_cpp):
                problems.append(f"field {s}::{f} has no {'NF' if newer_struct else 'F'}({s}, {f}...) line "
                                "in the ABI check")
        if newer_struct:
            if nvml_h is not None and nvml_struct(nvml_h, s) is not None:
                problems.append(f"struct {s} is declared in nvml.h: check it with S/F lines instead of NS/NF")
        elif nvml_h is not None:
            theirs = nvml_struct(nvml_h, s)
            if theirs is None:
                problems.append(f"struct {s} is not declared in nvml.h")
            elif theirs != fields:
                problems.append(f"struct {s}: nvml.h has fields {theirs}, tarmac has {fields}")

    newer = re.search(r"#define TARMAC_ABI_NEWER_THAN_HEADER\(N\)(.*?)\n\s*extern", check_cpp, re.S)
    newer_names = re.findall(r"\bN\((\w+)\)", newer.group(1)) if newer else []
    if not newer_names:
        problems.append("cannot find the TARMAC_ABI_NEWER_THAN_HEADER list in the ABI check")
    if nvml_h is not None:
        for name in newer_names:
            if re.search(r"\b" + name + r"\s*\(", nvml_h):
                problems.append(f"{name} is declared in nvml.h: drop it from the newer-than-header list")

    for p in problems:
        print("abi coverage: " + p)
    print(f"abi coverage: {len(types)} types, {len(constants)} constants, {len(structs)} structs, "
          f"{n_fields} fields in nvml_types.hpp; {len(newer_names)} functions declared by hand"
          + ("; struct field lists compared with nvml.h" if nvml_h is not None else "")
          + (f": {len(problems)} problem(s)" if problems else ": all covered"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
