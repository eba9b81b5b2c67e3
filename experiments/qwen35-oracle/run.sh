#!/usr/bin/env bash
# One device call (nvidia-h200): Hugging Face transformers against fak's Qwen3.5 logits on the
# tiny and the mid synthetic models (see README.md). For each: harness synth writes the f32 GGUF
# and its Hugging Face export; fak's CPU reference (`harness reference`) and, where the Vulkan
# loader is carried and the GPU engine runs qwen35, the GPU engine (`harness run`) write logits
# for the same ids; hf_compare.py runs transformers on the export and compares.
#
# Carried from this machine: target/qwen35-oracle/harness.tgz (a stripped harness binary) and,
# for the GPU engine, .gl/ (Vulkan loader debs, experiments/h200/README.md). Results in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
HERE=experiments/qwen35-oracle
OUT=${OUT:-/tmp/fak-out}
WORK=${WORK:-/tmp/qwen35-oracle}
mkdir -p "$OUT" "$WORK"
tar xzf target/qwen35-oracle/harness.tgz -C "$WORK"
H=$WORK/harness
GPU=0
if compgen -G ".gl/*.deb" > /dev/null; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan
  GPU=1
fi
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" | tee "$OUT/versions.txt"

# 48 ids from the whole table (seeded), then 16 greedy tokens: 64 positions compared.
ids=$(python3 -c "import random; random.seed(35); print(','.join(str(random.randrange(248320)) for _ in range(48)))")
status=0
for preset in tiny mid; do
  model=$WORK/$preset-f32.gguf hf=$WORK/$preset-hf
  "$H" synth --arch qwen35 --preset "$preset" --quant f32 --seed 35 --out "$model" --hf-dir "$hf" 2>&1 | tee -a "$OUT/log.txt"
  "$H" reference --model "$model" --tokens "$ids" -n 16 --logits-out "$WORK/$preset-reference.f32" 2>&1 | tee -a "$OUT/log.txt"
  python3 "$HERE/hf_compare.py" --hf-dir "$hf" --logits "$WORK/$preset-reference.f32" \
    --report "$OUT/$preset-reference.json" > /dev/null 2>> "$OUT/log.txt" || status=1
  if [ "$GPU" = 1 ]; then
    if "$H" run --model "$model" --tokens "$ids" -n 16 --ignore-eos --json \
         --logits-out "$WORK/$preset-gpu.f32" > "$OUT/$preset-gpu-run.json" 2>> "$OUT/log.txt"; then
      python3 "$HERE/hf_compare.py" --hf-dir "$hf" --logits "$WORK/$preset-gpu.f32" \
        --report "$OUT/$preset-gpu.json" > /dev/null 2>> "$OUT/log.txt" || status=1
    else
      echo "$preset: GPU engine skipped: harness run failed (see log.txt)" | tee -a "$OUT/log.txt"
    fi
  fi
done
python3 - "$OUT" <<'EOF'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/*-*.json")):
    if path.endswith("-run.json"):
        continue
    r = json.load(open(path))
    print(f"{path.rsplit('/', 1)[1]}: pass={r['pass']} min_cosine={r['min_cosine']:.9f} "
          f"argmax {r['argmax_agree']}/{r['positions']} max_abs_diff={r['max_abs_diff']:.3g} "
          f"({r['loader']}, transformers {r['transformers']}, {r['device']})")
EOF
exit $status
