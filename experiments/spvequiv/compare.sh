#!/usr/bin/env bash
# Are two commits' cooperative-matrix pipelines the same programs? Without an NVIDIA device:
# each commit's engine composes the modules an NVIDIA-like adapter builds (spvdump.rs), naga
# translates each pipeline to SPIR-V with its overrides applied, spirv-opt normalizes both sides
# the same way (everything inlined, dead code and dead branches gone, constants folded, ids
# canonical), and the two are compared as text (renumber.py) and as data flow (dataflow.py).
# Identical text means the same operations on the same operands in the same order (spirv-opt's
# passes keep float semantics: no reassociation, no contraction); the same data flow, the same
# but for the order of independent instructions; a difference is for a reader, who may show what
# it is by undoing it in a copy of the module (PATCHED) (experiments/NOTES.md "spvequiv").
#
#   experiments/spvequiv/compare.sh dump CHECKOUT OUT [PATCHED]  # spvdump in CHECKOUT (its own target
#                                                       # dir); PATCHED: modules read from there
#   experiments/spvequiv/compare.sh diff OLD_OUT NEW_OUT   # normalize both, table of verdicts
#   experiments/spvequiv/compare.sh tools DIR              # SPIRV_TOOLS for diff, into DIR
#
# SPIRV_TOOLS: a folder with spirv-opt and spirv-dis that know SPV_KHR_cooperative_matrix
# (Debian 12's 2023.1 does not; sid's 2026.4 does, and runs on Debian 12 through trixie's loader
# and libraries: `tools` fetches them with apt lists of its own, installing nothing). Give each
# checkout its own CARGO_TARGET_DIR (dump checks that the engine it ran is the checkout's).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "compare.sh: $*" >&2; exit 1; }

# spirv-opt's normalization: -O (everything inlined, locals to SSA, constants folded — RUN_KEYS =
# 0's branches go here —, dead code and dead branches gone, redundant loads and expressions
# merged), then what -O leaves unused in the declarations, then declared ids named by what they
# are (canonical: a type by its content, a variable by its name, so before --strip-debug) rather
# than by where naga declared them.
readonly PASSES=(
    -O --eliminate-dead-const --remove-unused-interface-variables --eliminate-dead-variables
    --remove-duplicates --unify-const --canonicalize-ids --strip-debug --strip-nonsemantic
)

# -O without --ccp, for modules on which spirv-opt 2026.4's ccp crashes (the x16 mat-mul's main):
# both sides of such a pipeline are normalized with it.
readonly WITHOUT_CCP=(
    --wrap-opkill --eliminate-dead-branches --merge-return --inline-entry-points-exhaustive
    --eliminate-dead-functions --eliminate-dead-code-aggressive --private-to-local
    --eliminate-local-single-block --eliminate-local-single-store --eliminate-dead-code-aggressive
    --convert-local-access-chains --eliminate-local-single-block --eliminate-local-single-store
    --eliminate-dead-code-aggressive --ssa-rewrite --eliminate-dead-code-aggressive --loop-unroll
    --eliminate-dead-branches --redundancy-elimination --combine-access-chains
    --simplify-instructions --convert-local-access-chains --eliminate-local-single-block
    --eliminate-local-single-store --eliminate-dead-code-aggressive --ssa-rewrite
    --eliminate-dead-code-aggressive --vector-dce --eliminate-dead-inserts --eliminate-dead-branches
    --simplify-instructions --if-conversion --copy-propagate-arrays --reduce-load-size
    --eliminate-dead-code-aggressive --merge-blocks --redundancy-elimination
    --eliminate-dead-branches --merge-blocks --simplify-instructions
    "${PASSES[@]:1}"
)

tool() {
    local name=$1
    shift
    [[ -n ${SPIRV_TOOLS:-} ]] || die "SPIRV_TOOLS is unset"
    "${SPIRV_TOOLS}/${name}" "$@"
}

dump() {
    local checkout=$1 out patched=
    out=$(realpath -m "$2")
    [[ -z $3 ]] || patched=$(realpath "$3")
    [[ -d ${checkout}/engine ]] || die "${checkout} is not a fak checkout"
    mkdir -p "${checkout}/engine/examples"
    cp "${here}/spvdump.rs" "${checkout}/engine/examples/spvdump.rs"
    (cd "${checkout}" && cargo run -q -p fak --example spvdump -- "${out}" ${patched:+"${patched}"})
    rm "${checkout}/engine/examples/spvdump.rs"
    rmdir --ignore-fail-on-non-empty "${checkout}/engine/examples"
    # The engine that ran must be this checkout's: cargo names a workspace's crates by their path
    # inside it, so two checkouts sharing a target dir share the engine's build, and a checkout
    # whose files are older than that build runs the other's engine.
    local module=${out}/gated_delta_chunk.dk128.coop+quads+fused+lean+blocks.wgsl
    python3 -c 'import sys; sys.exit(open(sys.argv[2]).read() not in open(sys.argv[1]).read())' \
        "${module}" "${checkout}/wgsl/gated_delta_chunk_coop.wgsl" ||
        [[ -n ${patched} ]] || die "${out} is not ${checkout}'s engine: give each checkout its own CARGO_TARGET_DIR"
}

# `normal IN.spv DIR NAME PASSES…`: DIR/normal/NAME.txt, the normalized disassembly (declarations
# sorted, local ids renamed in order: renumber.py), and DIR/flow/NAME.txt, its functions as data
# flow (dataflow.py: blind to the order of independent instructions); fails where spirv-opt does.
normal() {
    local spv=$1 dir=$2 name=$3 tmp
    shift 3
    tmp=$(mktemp)
    mkdir -p "${dir}/normal" "${dir}/flow"
    tool spirv-opt --skip-validation --target-env=vulkan1.3 "$@" "${spv}" -o "${tmp}" 2>/dev/null || {
        rm -f "${tmp}"
        return 1
    }
    tool spirv-dis --raw-id --no-header "${tmp}" -o "${tmp}.txt"
    "${here}/renumber.py" <"${tmp}.txt" >"${dir}/normal/${name}.txt"
    "${here}/dataflow.py" <"${tmp}.txt" >"${dir}/flow/${name}.txt"
    rm -f "${tmp}" "${tmp}.txt"
}

# The verdict on one pipeline: identical (the same normalized text), same-flow (the same data flow,
# declarations included: only independent instructions in another order, or ids numbered
# otherwise), or DIFFERS.
verdict() {
    local old=$1 new=$2 name=$3
    if cmp -s "${old}/normal/${name}.txt" "${new}/normal/${name}.txt"; then
        echo identical
    elif cmp -s "${old}/flow/${name}.txt" "${new}/flow/${name}.txt"; then
        echo same-flow
    else
        echo DIFFERS
    fi
}

diff_dumps() {
    local old=$1 new=$2 name role config v
    printf '%-8s %-16s %s\n' role verdict pipeline
    while IFS=$'\t' read -r name role config; do
        if [[ ! -f ${old}/${name}.spv ]]; then
            v=new-only
        else
            if normal "${old}/${name}.spv" "${old}" "${name}" "${PASSES[@]}" &&
                normal "${new}/${name}.spv" "${new}" "${name}" "${PASSES[@]}"; then
                v=$(verdict "${old}" "${new}" "${name}")
            else
                normal "${old}/${name}.spv" "${old}" "${name}" "${WITHOUT_CCP[@]}"
                normal "${new}/${name}.spv" "${new}" "${name}" "${WITHOUT_CCP[@]}"
                v=$(verdict "${old}" "${new}" "${name}")-noccp
            fi
        fi
        printf '%-8s %-16s %s\n' "${role}" "${v}" "${name}"
    done <"${new}/manifest.tsv"
    # Pipelines the old commit built that the new one does not.
    cut -f1 "${old}/manifest.tsv" | sort >"${old}/names"
    cut -f1 "${new}/manifest.tsv" | sort | comm -23 "${old}/names" - | sed 's/^/-        old-only         /'
}

# SPIRV-Tools 2026.4 (sid) with trixie's loader, libc and libstdc++ under DIR, and DIR/bin/TOOL
# scripts that run each through that loader.
readonly DEBS=(spirv-tools=2026.4~rc2-1 libc6=2.41-12+deb13u5 libstdc++6=14.2.0-19 libgcc-s1=14.2.0-19)
tools() {
    local dir=$1 mirror lib tool
    mkdir -p "${dir}/apt/lists/partial" "${dir}/apt/cache/archives/partial" "${dir}/debs" "${dir}/root" "${dir}/bin"
    mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' | head -n1)
    for suite in trixie sid; do
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror} ${suite} main"
    done >"${dir}/apt/sources.list"
    local apt_options=(-o APT::Sandbox::User=root -o Dir::State::Lists="${dir}/apt/lists"
        -o Dir::Etc::SourceList="${dir}/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::Cache="${dir}/apt/cache")
    apt-get -q "${apt_options[@]}" update >/dev/null
    (cd "${dir}/debs" && apt-get -q "${apt_options[@]}" download "${DEBS[@]}")
    for deb in "${dir}"/debs/*.deb; do dpkg-deb -x "${deb}" "${dir}/root"; done
    lib=${dir}/root/usr/lib/x86_64-linux-gnu
    for tool in spirv-opt spirv-dis spirv-val spirv-diff; do
        printf '#!/bin/sh\nexec %s/ld-linux-x86-64.so.2 --library-path %s %s/root/usr/bin/%s "$@"\n' \
            "${lib}" "${lib}" "${dir}" "${tool}" >"${dir}/bin/${tool}"
        chmod +x "${dir}/bin/${tool}"
    done
    "${dir}/bin/spirv-opt" --version
}

case ${1:-} in
    dump) dump "$2" "$3" "${4:-}" ;;
    diff) diff_dumps "$2" "$3" ;;
    tools) tools "$2" ;;
    *) die "usage: compare.sh dump CHECKOUT OUT [PATCHED] | diff OLD_OUT NEW_OUT | tools DIR" ;;
esac
