#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall at ROUNDS=2; no llama.cpp): issue 18's decode
# attention in one dispatch a layer — helper attndec (2026-12-06 #11; experiments/NOTES.md
# "attndec"), opt-in as FAK_ATTN_DECODE=oneshot:
#   oneshot — the split pass's workgroups as today (the default's key walk and split rule), the
#          last split of each (sequence, kv head) to finish combining its GROUP heads in the same
#          dispatch (an arrival counter it resets), instead of a combine dispatch: 36 dispatches
#          fewer a token on the Qwen3-8B, 16 on the Qwen3.5-27B; the same bits as the default.
#   oneshot-rope — with FAK_DECODE_FUSE=rope too (rope_kv inside the attention): 72 fewer on
#          the 8B.
# In order of what the call must not lose:
#   1. the tests on NVIDIA's 32-wide paths → tests.log: gpu_attn_decode (the oneshot forms
#      against the two-pass bits and the reference, counters read back 0) and
#      gpu_attention_step under FAK_ATTN_DECODE=oneshot; model_qwen3's (with rope too) and
#      model_qwen35's decode tests under FAK_ATTN_DECODE=oneshot (qwen35's counts one attention
#      dispatch a layer).
#   2. `harness bench` decode (`--n-out 32 --profile-steps 1`): the Qwen3-8B synth at depths
#      128,2048,8192 and the Qwen3.5-27B synth at depth 128, default / oneshot / oneshot-rope
#      interleaved ROUNDS (2) times → bench.log, decode.tsv (arm, round, model, depth, tok/s,
#      µs/token, profiled attention µs, dispatches a step), bench-json.tgz.
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (190 s from the start).
# A dry run elsewhere: PRESET8=tiny PRESET27=tiny DEPTHS8=40,300 (the synth presets) and
# M8, M27 naming two files (the same preset would name one).
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu and model groups; no
# MATMUL_BENCH / MATVEC_BENCH needed):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_attn_decode \
#       gpu_attention_step model_qwen3 model_qwen35
# staged as target/<dir>, run `cd target/<dir> && bash experiments/h200/attndec.sh` or through
# multi.sh (`attndec:200`), carry ["target/<dir>"].
# Files back: tests.log, bench.log, decode.tsv, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 500 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET8=${PRESET8:-qwen3-8b}
PRESET27=${PRESET27:-qwen35-27b}
M8=${M8:-/dev/shm/$PRESET8-q4_k_m.gguf}
M27=${M27:-/dev/shm/$PRESET27-q4_k_m.gguf}
DEPTHS8=${DEPTHS8:-128,2048,8192}
synth() { # synth ARCH PRESET FILE: once per machine (another script of the call may have)
    [ -s "$3" ] && return 0
    "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
        --out "$3.part" && mv "$3.part" "$3"
}
synth qwen3 "$PRESET8" "$M8" > /tmp/synth8-attndec.log 2>&1 &
SYNTH8=$!
synth qwen35 "$PRESET27" "$M27" > /tmp/synth27-attndec.log 2>&1 &
SYNTH27=$!

O=FAK_ATTN_DECODE=oneshot
R=FAK_DECODE_FUSE=rope
# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests;
# each line: variables (or -), binary, filters.
while read -r vars bin filters; do
    [ -x "$BIN/$bin" ] || { echo "== $bin: not carried" >> "$OUT/tests.log"; continue; }
    [ "$vars" = - ] && vars=
    limit=40
    [ "$bin" = model ] && limit=45
    echo "== ${vars:-default} $bin $filters (at $((SECONDS - start)) s)" >> "$OUT/tests.log"
    # shellcheck disable=SC2086 # the variables are NAME=value words, the filters words
    env ${vars//,/ } timeout "$limit" "$BIN/$bin" --skip llama_cpp --skip mlx_lm $filters 2>&1 \
        | grep -E "^test |test result|panicked at|differ|outside|> tol" | cut -c1-240 | head -30 \
        >> "$OUT/tests.log"
done <<EOF
- gpu gpu_attn_decode::
$O gpu gpu_attention_step::
$O model model_qwen35::a_decode_step model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup model_qwen35::int_dot_logits --test-threads=1
$O,$R model model_qwen3::f32_logits model_qwen3::int_dot_logits --test-threads=1
EOF
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH8 || { tail -3 /tmp/synth8-attndec.log; kill $CLOCKS; exit 1; }
echo "== 8B synth done at $((SECONDS - start)) s"
rm -rf /tmp/bench-json-attndec && mkdir -p /tmp/bench-json-attndec
printf 'arm\tround\tmodel\tdepth\tdecode_tok_s\tdecode_us\tattention_us_profiled\tdispatches\n' \
    > "$OUT/decode.tsv"
BUDGET_S=${BUDGET_S:-190}

bench() { # bench MODEL ARM ROUND SECONDS VARS: one `harness bench`, unless over budget
    local model=$1 arm=$2 round=$3 need=$4 vars=$5
    local label=$model-$arm-$round file=$M8 depths=$DEPTHS8
    [ "$model" = 27b ] && file=$M27 depths=128
    if [ $((SECONDS - start + need)) -gt "$BUDGET_S" ]; then
        echo "== $label SKIPPED (at $((SECONDS - start)) s)" >> "$OUT/bench.log"
        return
    fi
    echo "== $label: ${vars:-default}, depths $depths (at $((SECONDS - start)) s)" \
        >> "$OUT/bench.log"
    local json=/tmp/bench-json-attndec/$label.json
    # shellcheck disable=SC2086 # the variables are NAME=value words
    env ${vars//,/ } timeout "$need" "$BIN/harness" bench --model "$file" --depths "$depths" \
        --n-out 32 --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$json" \
        > /tmp/bench-attndec.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+:|^  (attention|rope_kv) |rror|panicked" /tmp/bench-attndec.log \
        | cut -c1-220 >> "$OUT/bench.log"
    python3 - "$json" "$arm" "$round" "$model" >> "$OUT/decode.tsv" <<'PY' || true
import json, sys
path, arm, rnd, model = sys.argv[1:]
b = json.load(open(path))
for d in b["depths"]:
    att = sum(o["gpu_us"] for o in d.get("ops") or [] if o["name"] == "attention")
    print(f"{arm}\t{rnd}\t{model}\t{d['depth']}\t{d['decode_tokens_per_s']:.1f}\t"
          f"{d['decode_us_per_token']:.0f}\t{att:.0f}\t{d.get('dispatches_per_step')}")
PY
    (cd /tmp/bench-json-attndec && tar czf "$OUT/bench-json.tgz" ./*.json)
}
# Since 2026-12-06 #11 the rope fusion is the default: `oneshot` then runs with it, and the
# oneshot-rope arm (ARMS="default:- oneshot:$O oneshot-rope:$O,$R", before) repeats it.
ARMS=${ARMS:-"default:- oneshot:$O"}
for round in $(seq "${ROUNDS:-2}"); do
    for arm in $ARMS; do
        vars=${arm#*:}
        [ "$vars" = - ] && vars=
        bench 8b "${arm%%:*}" "$round" 25 "$vars"
    done
    if [ "$round" = 1 ]; then
        wait $SYNTH27 || { tail -3 /tmp/synth27-attndec.log; }
        echo "== 27B synth done at $((SECONDS - start)) s" >> "$OUT/bench.log"
    fi
    [ -s "$M27" ] || continue
    for arm in $ARMS; do
        vars=${arm#*:}
        [ "$vars" = - ] && vars=
        bench 27b "${arm%%:*}" "$round" 20 "$vars"
    done
done
kill $CLOCKS
cat "$OUT/decode.tsv"
grep -E "SKIPPED|^rc=[1-9]" "$OUT/bench.log"
echo "== done at $((SECONDS - start)) s"
