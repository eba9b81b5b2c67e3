#!/usr/bin/env bash
# `harness bench` arms interleaved on one synth shape — the A/B every form's timing needs, for
# forms that already passed their tests on the device (no tests here):
#   bash experiments/h200/abbench.sh SHAPE DEPTHS NOUT ARM...
# SHAPE 27b or 8b (Q4_K_M --fast-random, seed 0: the files every call script writes); DEPTHS as
# `bench --depths`; ARM `label` (the defaults) or `label=VAR=value[;VAR=value…]`. Each round runs
# every arm once, in order, ROUNDS (2) times; a `--flag=value` in an arm's list is passed to
# `harness bench` instead of the environment (`c2048=--prefill-chunk=2048`), and `HARNESS=name`
# runs $BIN/name instead of $BIN/harness (`base=HARNESS=harness-base`: prepare.sh's BASE_HARNESS); a bench that would pass BUDGET_S from the start (by
# EST_S a bench, 30) is skipped and logged SKIPPED. SEQS=N adds `--sequences N`; ROWS is the
# extended regex of profile rows to keep (default: none). Appends to $OUT/bench.log (each arm's
# `depth` lines and rows), keeps every run's JSON in $OUT/bench-json.tgz; SM clocks every 500 ms
# → $OUT/clocks.csv (nvidia-smi; absent in a dry run).
# Example (the first call of 2026-12-06 #11, s11a.sh): abbench.sh 8b 128 32 default rope=FAK_DECODE_FUSE=rope
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
shape=$1 depths=$2 nout=$3
shift 3
case $shape in
    27b) arch=qwen35 preset=qwen35-27b ;;
    8b) arch=qwen3 preset=qwen3-8b ;;
    *) echo "abbench.sh: unknown shape $shape (27b or 8b)" >&2; exit 2 ;;
esac
preset=${PRESET:-$preset} # a dry run elsewhere: PRESET=tiny (and FAK_TMP, FAK_LOADER, FAK_VK_ICD)
model=/dev/shm/$preset-q4_k_m.gguf
[ -s "$model" ] || "$BIN/harness" synth --arch $arch --preset $preset --quant q4_k_m --seed 0 \
    --fast-random --out "$model" > "$OUT/synth-$shape.log" 2>&1 \
    || { tail -3 "$OUT/synth-$shape.log"; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 >> "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
mkdir -p /tmp/bench-json
start=$SECONDS
seqs=()
[ -z "${SEQS:-}" ] || seqs=(--sequences "$SEQS")
for round in $(seq "${ROUNDS:-2}"); do
    for arm in "$@"; do
        label=${arm%%=*}
        vars=() flags=()
        [ "$label" = "$arm" ] || IFS=';' read -r -a vars <<< "${arm#*=}"
        exe=$BIN/harness
        for v in "${vars[@]+"${vars[@]}"}"; do [[ $v == --* ]] && flags+=("$v"); done
        for v in "${vars[@]+"${vars[@]}"}"; do [[ $v == HARNESS=* ]] && exe=$BIN/${v#HARNESS=}; done
        for i in "${!vars[@]}"; do [[ ${vars[$i]} == --* || ${vars[$i]} == HARNESS=* ]] && unset 'vars[i]'; done
        name=$shape-$label-$round
        if [ $((SECONDS - start + ${EST_S:-30})) -gt "${BUDGET_S:-600}" ]; then
            echo "== $name ${vars[*]+${vars[*]}} SKIPPED (at $((SECONDS - start)) s)" | tee -a "$OUT/bench.log"
            continue
        fi
        echo "== $name ${vars[*]+${vars[*]}} ${flags[*]+${flags[*]}} (at $((SECONDS - start)) s)" >> "$OUT/bench.log"
        env "${vars[@]}" timeout 90 "$exe" bench --model "$model" --depths "$depths" \
            --n-out "$nout" --profile-steps 1 --suffix 0 --probe-mib 256 "${seqs[@]}" "${flags[@]+"${flags[@]}"}" \
            --json-out "/tmp/bench-json/$name.json" > /tmp/bench.log 2>&1
        echo "rc=$?" >> "$OUT/bench.log"
        grep -E "^depth [0-9]+|panicked|rror${ROWS:+|$ROWS}" /tmp/bench.log | cut -c1-240 \
            >> "$OUT/bench.log"
    done
done
(cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
kill $CLOCKS
grep -E "^==|^depth [0-9]+" "$OUT/bench.log" | cut -c1-200
