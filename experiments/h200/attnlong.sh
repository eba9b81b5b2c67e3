#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ~2.5 min wall; no llama.cpp): the decode
# attention's key loop of 2026-12-05 #6 (attnlong: 4 keys per team and step, their loads
# together, one vec4 butterfly and one online-softmax rescale per step, the combine loading 4
# splits at once) against the form before it (FAK_ATTN_DECODE=old, same binary), on the
# Qwen3-8B shape whose decode fell to 145 tok/s at depth 8192 (llama-bench 222; acceptance call A
# of the same session, experiments/NOTES.md). In order of what the call must not lose:
#   1. gpu_attn_decode and gpu_attention_step (every variant and both forms of the key loop
#      against the CPU reference, on NVIDIA's 32-wide subgroups) → tests.log;
#   2. `harness bench --depths 128,2048,8192 --n-out 32` on the 8B synth file, old and new
#      interleaved ROUNDS (2) times, one step profiled op by op (the attention op's µs per token
#      is the one to read) → bench.log, decode.tsv (tok/s and attention µs per arm, depth,
#      round), bench-json.tgz;
#   3. where time is left, `--sequences 4` at depth 2048 for each arm (batched decode: 4
#      sequences, their own positions and page tables) → bench.log;
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   RELEASE_TARGET_DIR=/work/targets/attnlong-rel experiments/h200/prepare.sh \
#       gpu_attn_decode gpu_attention_step
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at}} (README.md,
# "Calls"), run `cd target/<dir> && bash experiments/h200/attnlong.sh`, carry ["target/<dir>"].
# Files back: tests.log, bench.log, decode.tsv, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
T0=$(date +%s)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!

for t in gpu_attn_decode gpu_attention_step; do
    echo "== $t" >> "$OUT/tests.log"
    timeout 60 "$BIN/$t" 2>&1 | grep -E "^test |test result|panicked at|Err|mismatch|> tol" \
        | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS; exit 1; }
echo "[$(( $(date +%s) - T0 )) s] tests and synth done"
mkdir -p /tmp/bench-json
printf 'arm\tround\tdepth\tsequences\tdecode_tok_s\tdecode_us\tattention_us_profiled\n' \
    > "$OUT/decode.tsv"

bench() { # bench ARM ROUND DEPTHS SEQUENCES: one `harness bench`, old = FAK_ATTN_DECODE=old
    local arm=$1 round=$2 depths=$3 n=$4 json=/tmp/bench-json/$1-$2-d${3//,/-}-s$4.json
    local form=new
    [ "$arm" = old ] && form=old
    echo "== $arm round $round: depths $depths, sequences $n" >> "$OUT/bench.log"
    FAK_ATTN_DECODE=$form timeout 60 "$BIN/harness" bench --model "$M8" --depths "$depths" \
        --n-out 32 --sequences "$n" --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "$json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+(:| batched)|^  attention|rror|panicked" /tmp/bench.log | cut -c1-200 \
        >> "$OUT/bench.log"
    python3 - "$json" "$arm" "$round" "$n" >> "$OUT/decode.tsv" <<'EOF' || true
import json, sys
path, arm, rnd, n = sys.argv[1:]
b = json.load(open(path))
for d in b["depths"]:
    att = sum(o["gpu_us"] for o in d.get("ops") or [] if o["name"] == "attention")
    print(f"{arm}\t{rnd}\t{d['depth']}\t{n}\t{d['decode_tokens_per_s']:.1f}\t"
          f"{d['decode_us_per_token']:.0f}\t{att:.0f}")
EOF
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench old "$round" 128,2048,8192 1
    bench new "$round" 128,2048,8192 1
    echo "[$(( $(date +%s) - T0 )) s] round $round done"
done
cat "$OUT/decode.tsv"
if [ $(( $(date +%s) - T0 )) -lt 130 ]; then
    bench old 1 2048 4
    bench new 1 2048 4
    grep -A1 "sequences 4" "$OUT/bench.log" | grep -E "^==|batched"
fi
grep -E "^==|^depth|^  attention" "$OUT/bench.log"
kill $CLOCKS
echo "[$(( $(date +%s) - T0 )) s] done"
