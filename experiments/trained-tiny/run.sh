#!/usr/bin/env bash
# Rebuilds the trained tiny models from nothing but this repository: generated text → the cut
# vocabulary → token ids (fak's tokenizer) → training (transformers' Qwen3 / Qwen3.5 classes on
# torch, CPU) → the f16 GGUF fixtures (`harness synth --preset trained --weights`), then checks
# torch's logits against fak's CPU reference on each GGUF. Every step is deterministic; the
# committed fixtures are what this printed at the commit that added them (see README.md).
#
#   experiments/trained-tiny/run.sh                 everything
#   STEPS_QWEN3=600 STEPS_QWEN35=400 run.sh         training steps (defaults below)
#
# Needs: cargo (the harness is built after the vocabulary is cut: synth embeds it), $FAK_PYTHON
# with gguf and regex (ci/requirements.txt's venv), $TORCH_PYTHON with torch and
# transformers==5.24.0.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "${here}/../.." && pwd)
cd "${repo}"
harness=${CARGO_TARGET_DIR:-target}/debug/harness
python=${FAK_PYTHON:-${HOME}/.cache/fak/venv/bin/python}
torch_python=${TORCH_PYTHON:-python3}
work=${WORK:-/tmp/fak-trained-tiny}
fixtures=tests/fixtures
vocab=${fixtures}/vocab/ggml-vocab-qwen-cut4k.gguf
n_vocab=4096
mkdir -p "${work}" "${fixtures}/trained"

# Training text: 1.2 MB of generated prose plus the threeway corpus twenty times over, so the
# harness's default prompts are text the model knows. Held-out: another seed, never trained on.
python3 "${here}/gen_corpus.py" --seed 1 --chars 1200000 >"${work}/generated.txt"
cp "${work}/generated.txt" "${work}/train.txt"
for _ in $(seq 20); do
    printf '\n\n' >>"${work}/train.txt"
    cat harness/threeway/corpus.txt >>"${work}/train.txt"
done
python3 "${here}/gen_corpus.py" --seed 2 --chars 6000 >"${fixtures}/trained/heldout.txt"

"${python}" "${here}/cut_vocab.py" --vocab "${fixtures}/vocab/ggml-vocab-qwen2.gguf" \
    --text "${work}/train.txt" --n-vocab "${n_vocab}" --out "${vocab}"
cargo build --locked -p fak-harness --bin harness
"${harness}" tokenize --model "${vocab}" --json --file "${work}/train.txt" >"${work}/train.ids.json"
"${harness}" tokenize --model "${vocab}" --json --file "${fixtures}/trained/heldout.txt" \
    >"${work}/heldout.ids.json"

train() {
    local arch=$1 steps=$2
    "${torch_python}" "${here}/train.py" --arch "${arch}" --steps "${steps}" --n-vocab "${n_vocab}" \
        --train-ids "${work}/train.ids.json" --heldout-ids "${work}/heldout.ids.json" \
        --out "${work}/${arch}"
    cp "${work}/${arch}/train.json" "${here}/${arch}-train.json"
    local gguf="${fixtures}/trained/${arch}-trained-f16.gguf"
    "${harness}" synth --arch "${arch}" --preset trained --quant f16 \
        --weights "${work}/${arch}/model.safetensors" --out "${gguf}"
    # torch's logits on the probe against fak's CPU reference on the GGUF just written.
    local ids
    ids=$("${python}" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["token_ids"])))' \
        "${work}/${arch}/probe.f32.json")
    "${harness}" reference --model "${gguf}" --tokens "${ids}" --logits-out "${work}/${arch}/fak.f32"
    "${python}" "${here}/compare_logits.py" "${work}/${arch}/probe.f32" "${work}/${arch}/fak.f32" \
        "${n_vocab}" | tee "${here}/${arch}-torch-vs-fak.txt"
}

train qwen3 "${STEPS_QWEN3:-600}"
train qwen35 "${STEPS_QWEN35:-400}"
ls -l "${vocab}" "${fixtures}"/trained/
