#!/usr/bin/env python3
"""Normalized SPIR-V text for a diff: `renumber.py < dis.txt > out.txt`.

Input: `spirv-dis --raw-id` of a module after `spirv-opt --canonicalize-ids`, whose declarations
(types, constants, variables) carry ids named by what they are, but whose function-local ids
depend on the function's hash (so one changed instruction renames every value). Output: the
declarations sorted (naga declares them in its order of first use), then the functions with
every id not declared above renamed %vN in order of first appearance. Two functions that do the
same operations on the same operands in the same order print the same text.
"""
import re
import sys

ID = re.compile(r"%(\d+)")


def main() -> None:
    lines = sys.stdin.read().splitlines()
    first_function = next(
        (i for i, line in enumerate(lines) if " OpFunction " in line), len(lines)
    )
    declarations, functions = lines[:first_function], lines[first_function:]
    declared = set()
    for line in declarations:
        target = re.match(r"\s*%(\d+) = ", line)
        if target:
            declared.add(target.group(1))
    local: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        n = match.group(1)
        if n in declared:
            return match.group(0)
        if n not in local:
            local[n] = f"%v{len(local)}"
        return local[n]

    body = [ID.sub(rename, line).strip() for line in functions]
    # The entry point names its function: renamed as the function's first line names it.
    heads = [ID.sub(rename, line).strip() for line in declarations]
    for line in sorted(heads):
        print(line)
    print("; ---- functions")
    for line in body:
        print(line)


main()
