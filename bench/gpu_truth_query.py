#!/usr/bin/env python3
"""Section 2 of bench/gpu_truth.sh: `tarmac query --query-gpu` against `nvidia-smi --query-gpu` for
every field both know, in one call of each for all the fields (a real driver can take a second to
open, so a call per field would take minutes), one call per field only where the batch cannot be
split into columns.

    gpu_truth_query.py TARMAC NVIDIA_SMI OUT_DIR

Prints one Markdown paragraph (the counts) and writes OUT_DIR/diffs (one line per field that
differs) and OUT_DIR/unknown (the fields tarmac does not answer). Exit 0 when no static field
differs, 1 when one does."""
import re
import subprocess
import sys

# Values that move between two reads a moment apart: compared within a tolerance.
DYNAMIC = re.compile(r"^(timestamp|utilization|temperature|power\.draw|power\.instant|power\.average|"
                     r"clocks\.(current|sm|mem|gr|video)|clocks\.(applications|default_applications)|"
                     r"memory\.(used|free|reserved)|fan|pstate|clocks_event|clocks_throttle|enforced|energy|"
                     r"pcie\.link\.(gen|width)\.(gpu)?current|encoder|decoder|ofa|module\.power|"
                     r"gpu_operation_mode)")
INVALID = re.compile(r'Field "([^"]+)" is not a valid field to query')


def ask(tool, fields):
    """Runs TOOL --query-gpu=FIELDS; returns (fields it answered, lines, fields it does not know)."""
    fields, invalid = list(fields), []
    while fields:
        r = subprocess.run([*tool, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode == 0:
            return fields, r.stdout.splitlines(), invalid
        m = INVALID.search(r.stdout + r.stderr)
        if not m or m.group(1) not in fields:
            raise RuntimeError(f"{' '.join(tool)} failed ({r.returncode}): {(r.stdout + r.stderr)[:300]}")
        fields.remove(m.group(1))
        invalid.append(m.group(1))
    return [], [], invalid


def num(text):
    m = re.match(r"^\s*(-?[0-9.]+)", text)
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def close(a, b):
    """Numbers 10 % or 5 units apart, GPU by GPU."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        nx, ny = num(x), num(y)
        if nx is None or ny is None or abs(nx - ny) > max(5.0, 0.10 * max(abs(nx), abs(ny))):
            return False
    return True


def columns(fields, lines):
    """{field: [value per GPU]}, or None when a value holds the separator itself."""
    rows = [line.split(", ") for line in lines]
    if any(len(row) != len(fields) for row in rows):
        return None
    return {f: [row[i] for row in rows] for i, f in enumerate(fields)}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tarmac, smi, out = [sys.argv[1], "query"], [sys.argv[2]], sys.argv[3]
    help_text = subprocess.run([*smi, "--help-query-gpu"], capture_output=True, text=True, timeout=60).stdout
    listed = sorted(set(re.findall(r'^"([a-z0-9_.]+)"', help_text, re.M)))
    smi_fields, smi_lines, refused = ask(smi, listed)
    ours, our_lines, unknown = ask(tarmac, smi_fields)
    theirs = columns(smi_fields, smi_lines)
    mine = columns(ours, our_lines)
    same = near = 0
    diffs = []
    for f in ours:
        if theirs is not None and mine is not None:
            a, b = theirs[f], mine[f]
        else:  # a value with ", " in it: this field alone, from each
            a = ask(smi, [f])[1]
            b = ask(tarmac, [f])[1]
        if a == b:
            same += 1
        elif DYNAMIC.match(f) and close(a, b):
            near += 1
        else:
            kind = "dynamic" if DYNAMIC.match(f) else "static"
            diffs.append(f"{f} ({kind}): nvidia-smi [{'|'.join(a)}] tarmac [{'|'.join(b)}]")
    with open(f"{out}/diffs", "w") as d:
        d.writelines(line + "\n" for line in diffs)
    with open(f"{out}/unknown", "w") as u:
        u.writelines(f + "\n" for f in unknown)
    print(f"Fields nvidia-smi lists: {len(listed)}; identical: {same}; dynamic within tolerance: {near};")
    print(f"different: {len(diffs)}; tarmac does not answer: {len(unknown)}; nvidia-smi itself refuses: "
          f"{len(refused)}.")
    sys.exit(1 if any("(static)" in line for line in diffs) else 0)


if __name__ == "__main__":
    main()
