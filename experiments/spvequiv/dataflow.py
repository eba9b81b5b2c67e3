#!/usr/bin/env python3
"""A module's functions as data flow, for a diff blind to the order of independent instructions:
`dataflow.py < dis.txt > out.txt`.

Input: `spirv-dis --raw-id` of a module after spirv-opt (-O, then --canonicalize-ids before
--strip-debug, so that a global variable's id comes from its name). Output: the declarations,
each type and constant named by what it is (its opcode, operands and decorations: canonical ids
of equal types can differ between modules), sorted; then per block, in the module's block order, its ordered effects only (phis, stores,
barriers, subgroup and atomic ops, merges and branches), each operand named by the hash of the
expression that computes it: a pure instruction's name is its opcode, result type and operands'
names; a load's also says which block it is in and after how many of that block's effects (the
memory it can see). So two functions print the same text where every store, barrier and branch
sees the same expression of the same loads — the same arithmetic with the same operands in the
same order — whatever order naga or the source put the independent loads and products in. A
float add with its operands swapped is a different name: arithmetic is compared as written.
"""
import hashlib
import re
import sys

RESULT = re.compile(r"^\s*%(\d+) = (Op\w+)\s*(.*)$")
PLAIN = re.compile(r"^\s*(Op\w+)\s*(.*)$")
ID = re.compile(r"^%(\d+)$")

# Instructions whose place among the block's memory operations matters (they read memory that
# others write, or are cross-lane, or write it); their results are named by that place.
READS = {"OpLoad", "OpCooperativeMatrixLoadKHR", "OpAtomicLoad"}
EFFECTS = {
    "OpStore", "OpCooperativeMatrixStoreKHR", "OpControlBarrier", "OpMemoryBarrier",
    "OpSelectionMerge", "OpLoopMerge", "OpBranch", "OpBranchConditional", "OpSwitch",
    "OpReturn", "OpReturnValue", "OpKill", "OpUnreachable", "OpFunctionCall", "OpCopyMemory",
}


def ordered(opcode: str) -> bool:
    return (
        opcode in EFFECTS
        or opcode.startswith("OpAtomic") and opcode != "OpAtomicLoad"
        or opcode.startswith("OpGroupNonUniform")
        or opcode.startswith("OpSubgroup")
    )


def short(text: str) -> str:
    return "h" + hashlib.sha1(text.encode()).hexdigest()[:12]


def functions(lines):
    """(declaration lines, [function's lines])."""
    declarations, current, out = [], None, []
    for line in lines:
        if current is None and " OpFunction " not in line:
            declarations.append(line)
            continue
        if " OpFunction " in line:
            current = []
        current.append(line)
        if line.strip() == "OpFunctionEnd":
            out.append(current)
            current = None
    return declarations, out


def declared_names(declarations):
    """Each declared id's name: a global variable's id (canonical: from its name) with its type's
    name; a type's or constant's hash of its opcode, operands' names and decorations."""
    defs, decorations = {}, {}
    for line in declarations:
        m = RESULT.match(line)
        if m:
            defs[m.group(1)] = (m.group(2), m.group(3).split())
            continue
        m = PLAIN.match(line)
        if m and m.group(1) in ("OpDecorate", "OpMemberDecorate"):
            target, *rest = m.group(2).split()
            decorations.setdefault(target.lstrip("%"), []).append(" ".join(rest))
    names = {}

    def name(token: str) -> str:
        m = ID.match(token)
        if not m or m.group(1) not in defs:
            return token
        i = m.group(1)
        if i not in names:
            opcode, rest = defs[i]
            text = " ".join([opcode] + [name(t) for t in rest] + sorted(decorations.get(i, [])))
            names[i] = f"%{i}:" + short(text) if opcode == "OpVariable" else "d" + short(text)[1:]
        return names[i]

    for i in defs:
        name("%" + i)
    lines = []
    for i, (opcode, rest) in defs.items():
        lines.append(f"{names[i]} = {opcode} " + " ".join(name(t) for t in rest))
    for i, decs in decorations.items():
        lines.extend(f"{name('%' + i)} decorated {d}" for d in decs if i in defs)
    return {"%" + i: n for i, n in names.items()}, sorted(lines)


def split_blocks(body):
    """(lines before the first label, [(label id, [its lines])])."""
    head, blocks = [], []
    for line in body:
        m = RESULT.match(line)
        if m and m.group(2) == "OpLabel":
            blocks.append((m.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            head.append(line)
    return head, blocks


def successors(lines):
    """A block's successors in its terminator's order, then its merge (and continue) targets."""
    out, merges = [], []
    for line in lines:
        m = PLAIN.match(line)
        if not m:
            continue
        opcode, ops = m.group(1), m.group(2).split()
        ids = [t[1:] for t in ops if ID.match(t)]
        if opcode == "OpBranch":
            out += ids
        elif opcode == "OpBranchConditional":
            out += ids[1:3]
        elif opcode == "OpSwitch":
            out += ids[1:]
        elif opcode in ("OpSelectionMerge", "OpLoopMerge"):
            merges += ids
    return out + merges


def block_order(blocks):
    """Label id -> canonical name: depth-first preorder from the entry, successors in their
    terminator's order (so two layouts of one control-flow graph name each block alike)."""
    lines = dict(blocks)
    order, seen, stack = [], set(), [blocks[0][0]] if blocks else []
    while stack:
        label = stack.pop()
        if label in seen or label not in lines:
            continue
        seen.add(label)
        order.append(label)
        stack.extend(reversed(successors(lines[label])))
    order += [label for label, _ in blocks if label not in seen]
    return {label: f"B{k}" for k, label in enumerate(order)}


def flow(body, declared):
    """The function's effects, block by block in canonical order, operands named by expression."""
    head, blocks = split_blocks(body)
    block_names = block_order(blocks)
    defs = {}  # id -> (opcode, operand tokens, block, epoch)
    phis = {}  # id -> (block, type, [(value, label)])
    var_count = 0
    for label, lines in blocks:
        block, epoch = block_names[label], 0
        for line in lines:
            m = RESULT.match(line)
            if m:
                rid, opcode, rest = m.group(1), m.group(2), m.group(3).split()
                if opcode == "OpPhi":
                    phis[rid] = (block, rest[0], list(zip(rest[1::2], rest[2::2])))
                    continue
                if opcode == "OpVariable":
                    defs[rid] = ("var", [f"var{var_count}"], block, 0)
                    var_count += 1
                    continue
                defs[rid] = (opcode, rest, block, epoch)
                if ordered(opcode):
                    epoch += 1
            else:
                m = PLAIN.match(line)
                if m and ordered(m.group(1)):
                    epoch += 1
    # A phi is named by its block, type and incoming values — which may be itself a loop later:
    # named by refinement (each round's names from the last round's), until the names split the
    # phis no further. Two phis left with one name compute the same values.
    colors = {i: short(f"phi {b} {t}") for i, (b, t, _) in phis.items()}
    names = {}

    def name(token: str) -> str:
        m = ID.match(token)
        if not m:
            return token
        if token in declared:
            return declared[token]
        i = m.group(1)
        if i in block_names:
            return block_names[i]
        if i in phis:
            return "phi:" + colors[i]
        if i in names:
            return names[i]
        opcode, rest, blk, ep = defs.get(i, ("undef", [], None, 0))
        if opcode == "var":
            names[i] = rest[0]
            return names[i]
        where = f"@{blk}:{ep}" if opcode in READS or ordered(opcode) else ""
        names[i] = short(" ".join([opcode, where] + [name(t) for t in rest]))
        return names[i]

    def incoming(i: str) -> str:
        _, _, pairs = phis[i]
        return " ".join(sorted(f"[{name(v)} {name(b)}]" for v, b in pairs))

    classes = len(set(colors.values()))
    while True:
        names.clear()
        refined = {i: short(f"{colors[i]} {incoming(i)}") for i in phis}
        colors = refined
        names.clear()
        if len(set(colors.values())) == classes:
            break
        classes = len(set(colors.values()))

    out = []
    for line in head:
        m = RESULT.match(line)
        if m:
            out.append(f"{m.group(2)} " + " ".join(name(t) for t in m.group(3).split()))
    by_name = sorted(blocks, key=lambda b: int(block_names[b[0]][1:]))
    for label, lines in by_name:
        out.append(f"{block_names[label]}:")
        # A block's phis are one parallel assignment: sorted.
        phi_lines = []
        for line in lines:
            m = RESULT.match(line)
            if m:
                rid, opcode, rest = m.group(1), m.group(2), m.group(3).split()
                if opcode == "OpPhi":
                    phi_lines.append(f"  {name('%' + rid)} = OpPhi {name(rest[0])} {incoming(rid)}")
                elif ordered(opcode):
                    out.append(f"  {name('%' + rid)} = {opcode} " + " ".join(name(t) for t in rest))
                continue
            m = PLAIN.match(line)
            if m and ordered(m.group(1)):
                out.append(f"  {m.group(1)} " + " ".join(name(t) for t in m.group(2).split()))
        at = out.index(f"{block_names[label]}:") + 1
        out[at:at] = sorted(phi_lines)
    out.append("OpFunctionEnd")
    return out


def main() -> None:
    lines = sys.stdin.read().splitlines()
    declarations, bodies = functions(lines)
    declared, listing = declared_names(declarations)
    for line in listing:
        print(line)
    print("; ---- functions")
    for body in bodies:
        for line in flow(body, declared):
            print(line)


main()
