#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall at the defaults; no llama.cpp): issue 18's
# producer-side quantize in blocks of 16 rows (helper pq16, 2026-12-06 #11; experiments/NOTES.md
# "pq16"), opt-in as FAK_DECODE_FUSE=pquant16. pquant (pqz) removed 127 of the 27B's quantize
# dispatches a token (518 → 391) and its consumers gained ~1.07 ms profiled, but its producers
# (ffn_down, gdn_out, attn_output) ran in 256/8/1 (a workgroup owns a 32-row block) and gave
# ~0.7 ms back: 88.2 → 88.4 tok/s on an H100. pquant16 writes a code scale and Σ x² per 16 rows,
# so the producers keep the default 256/4/1 (a 16-row workgroup owns one block) and the consumers
# take one x scale per 16 elements (Q6_K's groups are 16 already; Q4_K sums its sub-block's
# halves apart). The same dispatch count as pquant; not the default's bits (a relative-error
# bound against the CPU reference, finer than pquant's: half the elements a scale).
# In order of what the call must not lose:
#   1. the tests on NVIDIA's 32-wide paths → tests.log: gpu_matvec's producer/consumer tests in
#      blocks of 32 and 16 (every form and int-dot variant, against the CPU) and the mixed
#      binding over summed blocks (both sizes), the int-dot model tests of qwen35 and qwen3 with
#      FAK_DECODE_FUSE=pquant16 (the dispatch counts, the cosines against the q8-input
#      reference), serving's batch_invariance with the form on;
#   2. `harness bench` decode at depth 128 (`--n-out 32`) on the Qwen3.5-27B synth, default vs
#      pquant16 vs pquant interleaved ROUNDS (2) times → pq16.log (tok/s, dispatches, encode; the
#      producers' and consumers' rows of the profiled step: ffn_down, gdn_out, attn_output,
#      ffn_gate_up, gdn_qkv…, attn_q…); then the Qwen3-8B the same ROUNDS8 (1) times; then
#      merge,rope,pquant16 on the 27B once if the budget allows.
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (190 s from the start).
# A dry run elsewhere: PRESET27=tiny PRESET8=tiny (the synth presets), FAK_INT_DOT=1 where the
# adapter's default path is f32 (lavapipe) — see NOTES "pq16".
# SM clocks every 200 ms → clocks.csv. Prepare (release binaries; the gpu, model and serving
# groups; no MATMUL_BENCH / MATVEC_BENCH needed):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec model_qwen35 \
#       model_qwen3 batch_invariance
# staged as target/<dir>, run `cd target/<dir> && bash experiments/h200/pq16.sh` or through
# multi.sh (`pq16:200`), carry ["target/<dir>"].
# Files back: tests.log, pq16.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET27=${PRESET27:-qwen35-27b}
PRESET8=${PRESET8:-qwen3-8b}
M27=/dev/shm/$PRESET27-q4_k_m.gguf
M8=/dev/shm/$PRESET8-q4_k_m.gguf
# A dry run's one preset for both archs (tiny) needs two files.
[ "$PRESET8" = "$PRESET27" ] && M8=/dev/shm/qwen3-$PRESET8-q4_k_m.gguf
synth() { # synth ARCH PRESET FILE: once per machine (another script of the call may have)
    [ -s "$3" ] && return 0
    "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
        --out "$3.part" && mv "$3.part" "$3"
}
( synth qwen35 "$PRESET27" "$M27" && synth qwen3 "$PRESET8" "$M8" ) > /tmp/synth-pq16.log 2>&1 &
SYNTH=$!

# The group binaries (prepare.sh carries bin/gpu, bin/model and bin/serving), so that a filter
# picks tests. The kernel tests name their blocks themselves; the model and serving tests take
# the form from FAK_DECODE_FUSE.
for t in "gpu gpu_matvec::a_residual_producer gpu_matvec::a_mixed_binding_over_summed" \
    "model model_qwen35::int_dot model_qwen3::int_dot --test-threads=1" \
    "serving batch_invariance::q4_k_m batch_invariance::dense_logits_do_not_depend_on_the_batch batch_invariance::hybrid_logits_do_not_depend_on_the_batch"; do
    set -- $t
    [ -x "$BIN/$1" ] || { echo "== $1: not carried" >> "$OUT/tests.log"; continue; }
    limit=30
    [ "$1" = model ] && limit=45
    echo "== FAK_DECODE_FUSE=pquant16 $* (at $((SECONDS - start)) s)" >> "$OUT/tests.log"
    FAK_DECODE_FUSE=pquant16 timeout "$limit" "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" \
        2>&1 | grep -E "^test |test result|panicked at|differ|cosine|dispatches per step|fed (true|false)" \
        | cut -c1-240 | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth-pq16.log; kill $CLOCKS; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-pq16
BUDGET_S=${BUDGET_S:-190}

bench() { # bench MODEL LABEL SECONDS [env...]: one one-sequence `harness bench`, unless over budget
    local model=$1 label=$2 need=$3
    shift 3
    if [ $((SECONDS - start + need)) -gt "$BUDGET_S" ]; then
        echo "== $label $* SKIPPED (at $((SECONDS - start)) s)" >> "$OUT/pq16.log"
        return
    fi
    echo "== $label: $* (at $((SECONDS - start)) s)" >> "$OUT/pq16.log"
    env "$@" timeout "$need" "$BIN/harness" bench --model "$model" --depths 128 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-pq16/$label.json" > /tmp/bench-pq16.log 2>&1
    echo "rc=$?" >> "$OUT/pq16.log"
    grep -E "^depth 128:|^  (ffn_down|gdn_out|attn_output|ffn_gate_up|gdn_qkv[a-z]*|gdn_zba|attn_q[a-z]*|attn_qk) +matvec|rror|panicked" \
        /tmp/bench-pq16.log | cut -c1-220 >> "$OUT/pq16.log"
    (cd /tmp/bench-json-pq16 && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "$M27" "27b-default-$round" 35
    bench "$M27" "27b-pquant16-$round" 35 FAK_DECODE_FUSE=pquant16
    bench "$M27" "27b-pquant-$round" 35 FAK_DECODE_FUSE=pquant
done
for round in $(seq "${ROUNDS8:-1}"); do
    bench "$M8" "8b-default-$round" 25
    bench "$M8" "8b-pquant16-$round" 25 FAK_DECODE_FUSE=pquant16
    bench "$M8" "8b-pquant-$round" 25 FAK_DECODE_FUSE=pquant
done
bench "$M27" 27b-all16 35 FAK_DECODE_FUSE=merge,rope,pquant16
kill $CLOCKS
grep -E "^==|^rc=|^depth 128:" "$OUT/pq16.log" | cut -c1-200
echo "== done at $((SECONDS - start)) s"
