#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ~130 s wall, at most 200; no llama.cpp): the
# decode attention's opt-in forms of attn8k (2026-12-05 #7, issue 18: decode at depth) against
# the default 4-key walk, same binary, on the Qwen3-8B shape (8 kv heads, GROUP 4, head_dim 128,
# f16 cache) whose decode is 176 tok/s at depth 8192 against llama-bench's 222 on an H100:
#   FAK_ATTN_DECODE=ahead        the next step's 4 K/V rows loaded before the current ones are
#                                scored (two tiles in flight per team; the default's bits);
#   FAK_ATTN_DECODE_SPLITS=N     at most N splits per sequence (n_kv·N workgroups), longer splits;
#   FAK_ATTN_DECODE_SPLIT=K      splits of at least K keys: a context of ≤ K keys runs one split
#                                and records no combine dispatch.
# In order of what the call must not lose:
#   1. gpu_attn_decode (every variant, every form built explicitly, against the CPU reference;
#      the walk ahead bit for bit the default) and gpu_attention_step under each arm's variables
#      (the kernels as a model step records them) → tests.log;
#   2. `harness bench --depths $DEPTHS --n-out 32` (128,2048,8192) on the 8B synth file, the arms
#      (ARMS: default, ahead, ahead + at most 32 or 16 splits, ahead + 32 splits of ≥ 160 keys)
#      interleaved ROUNDS (2) times, one step profiled op by op → bench.log, decode.tsv (tok/s,
#      µs/token, the profiled attention op and the dispatches per arm, round, depth),
#      bench-json.tgz. A second round's arm is skipped past LIMIT_S (170) seconds so the call
#      ends inside 200.
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   RELEASE_TARGET_DIR=<dir> experiments/h200/prepare.sh gpu_attn_decode gpu_attention_step
# (main's build: those suites are in its `gpu` group binary) and run through multi.sh:
#   bash experiments/h200/multi.sh attn8k:200
# Files back: tests.log, bench.log, decode.tsv, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
# PRESET=tiny (with small DEPTHS) for a dry run on another adapter; ARCH=qwen35
# PRESET=qwen35-27b for the hybrid (its 16 attention layers, 4 kv heads). The file is written
# once per machine (another script of the call may have).
ARCH=${ARCH:-qwen3}
PRESET=${PRESET:-qwen3-8b}
M8=/dev/shm/$PRESET-q4_k_m.gguf
if [ -s "$M8" ]; then
    true &
else
    "$BIN/harness" synth --arch "$ARCH" --preset "$PRESET" --quant q4_k_m --seed 0 --fast-random \
        --out "$M8.part" > /tmp/synth8.log 2>&1 && mv "$M8.part" "$M8" &
fi
SYNTH8=$!

# name:VAR=value,VAR=value (no variables: the default form).
A=FAK_ATTN_DECODE=ahead
ARMS=${ARMS:-"default: ahead:$A ahead-s32:$A,FAK_ATTN_DECODE_SPLITS=32 ahead-s16:$A,FAK_ATTN_DECODE_SPLITS=16 ahead-s32-k160:$A,FAK_ATTN_DECODE_SPLITS=32,FAK_ATTN_DECODE_SPLIT=160"}
# 128 too: the short context is where longer splits skip the combine.
DEPTHS=${DEPTHS:-128,2048,8192}
LIMIT_S=${LIMIT_S:-170}

echo "== gpu_attn_decode" >> "$OUT/tests.log"
timeout 60 "$BIN/gpu_attn_decode" 2>&1 | grep -E "^test |test result|panicked at|differ|> tol" \
    | head -40 >> "$OUT/tests.log"
for arm in $ARMS; do
    vars=${arm#*:}
    echo "== gpu_attention_step, $arm" >> "$OUT/tests.log"
    # shellcheck disable=SC2086 # the variables are NAME=value words
    env ${vars//,/ } timeout 30 "$BIN/gpu_attention_step" 2>&1 \
        | grep -E "^test |test result|panicked at|> tol" | head -10 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS; exit 1; }
echo "[$(elapsed) s] tests and synth done"
rm -rf /tmp/attn8k-json && mkdir -p /tmp/attn8k-json
printf 'arm\tround\tdepth\tdecode_tok_s\tdecode_us\tattention_us_profiled\tdispatches\n' \
    > "$OUT/decode.tsv"

bench() { # bench NAME VARS ROUND: one `harness bench` with the arm's variables
    local name=$1 vars=$2 round=$3 json=/tmp/attn8k-json/$1-$3.json
    echo "== $name round $round: ${vars:-default}, depths $DEPTHS" >> "$OUT/bench.log"
    # shellcheck disable=SC2086 # the variables are NAME=value words
    env ${vars//,/ } timeout "${BENCH_TIMEOUT:-40}" "$BIN/harness" bench --model "$M8" --depths "$DEPTHS" \
        --n-out 32 --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$json" \
        > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+:|^  attention +attn_decode|rror|panicked" /tmp/bench.log \
        | cut -c1-220 >> "$OUT/bench.log"
    python3 - "$json" "$name" "$round" >> "$OUT/decode.tsv" <<'EOF' || true
import json, sys
path, arm, rnd = sys.argv[1:]
b = json.load(open(path))
for d in b["depths"]:
    att = sum(o["gpu_us"] for o in d.get("ops") or [] if o["name"] == "attention")
    print(f"{arm}\t{rnd}\t{d['depth']}\t{d['decode_tokens_per_s']:.1f}\t"
          f"{d['decode_us_per_token']:.0f}\t{att:.0f}\t{d.get('dispatches_per_step')}")
EOF
    (cd /tmp/attn8k-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    for arm in $ARMS; do
        if [ "$round" -gt 1 ] && [ "$(elapsed)" -gt "$LIMIT_S" ]; then
            echo "[$(elapsed) s] past ${LIMIT_S} s: $arm round $round skipped"
            continue
        fi
        bench "${arm%%:*}" "${arm#*:}" "$round"
    done
    echo "[$(elapsed) s] round $round done"
done
cat "$OUT/decode.tsv"
kill $CLOCKS
echo "[$(elapsed) s] done"
