# Sourced by acceptance.sh and acceptance-vulkan.sh (issues 18 and 19's acceptance run, one device
# call each): the call's clock and deadline, the models, the SM-clock log, and one function per
# kind of measurement, each run only if the time it needs is left (what is skipped is said in
# steps.log and summary.md), so that the call always ends by packing what it measured.
#
#   DEADLINE   seconds of the call by which everything is packed (560: the run tool stops a call
#              at 600 s)
#   MODELS     where the models are written (/dev/shm/accept); a model already there (a warm
#              machine) is kept: synth is deterministic, the packets record each file's sha256
#   ACCEPT_DRY=1  a dry run on a machine without the device (lavapipe, the CPU llama.cpp build,
#              tiny models, everything under ACCEPT_DRY_DIR=/tmp/accept-dry): every step of the
#              real call runs, only sizes and the devices differ
#
# Results: $OUT/steps.log (each step, its exit and seconds), $OUT/summary.md (the numbers the
# issues are judged by, one table per kind), $OUT/clocks.csv (SM and memory clocks, power, every
# 100 ms), and the caller's archive of the run folders.
T0=$SECONDS
DEADLINE=${DEADLINE:-560}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ "${ACCEPT_DRY:-0}" = 1 ]; then
    DRY=${ACCEPT_DRY_DIR:-/tmp/accept-dry}
    export FAK_TMP=$DRY/fak OUT=${OUT:-$DRY/out} FAK_LOADER=system
    export FAK_VK_ICD=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
    export LLAMA_DIR=${LLAMA_DIR:-$DRY/llama} LLAMA_GPU_FLAGS="-DGGML_CUDA=OFF -DGGML_NATIVE=OFF"
    export LLAMA_GENERATOR=${LLAMA_GENERATOR:-Unix Makefiles} LLAMA_JOBS=${LLAMA_JOBS:-2}
    MODELS=${MODELS:-$DRY/models}
    WORK=$DRY/work
    VK_PARTS=$DRY/vk-parts
    # arch:preset; tiny models with the 4 096-token cut vocabulary (a 150k head is most of a
    # tiny model's step on lavapipe).
    SHAPES=(qwen3:tiny qwen35:tiny)
    SYNTH_EXTRA=(--vocab cut)
else
    MODELS=${MODELS:-/dev/shm/accept}
    WORK=/tmp/accept
    VK_PARTS=/tmp/accept-vk-parts
    SHAPES=(qwen3:qwen3-8b qwen35:qwen35-27b)
    SYNTH_EXTRA=()
fi
[ "${ACCEPT_DRY:-0}" = 1 ] && rm -rf "$OUT"
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK" "$MODELS"
source experiments/h200/setup.sh
RUNS=$WORK/runs
mkdir -p "$RUNS"
export FAK_COMMIT=$(cat target/h200/commit 2>/dev/null || true)
MODEL_ORIGIN="harness synth --fast-random --seed 0 --quant q4_k_m (random Q4_K/Q6_K blocks, real shapes and tokenizer)"

log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
log "setup done: harness $FAK_COMMIT, $(nproc) CPUs, models in $MODELS${ACCEPT_DRY:+ (dry run)}"

# The label of a shape (arch:preset): the preset, or arch-tiny.
label() {
    local arch=${1%%:*} preset=${1#*:}
    [ "$preset" = tiny ] && echo "$arch-tiny" || echo "$preset"
}
model_of() { echo "$MODELS/$(label "$1").gguf"; }

# Writes every shape's model that is not there yet (synth writes to a temporary name first).
synth_models() {
    local s
    for s in "${SHAPES[@]}"; do
        local m
        m=$(model_of "$s")
        [ -s "$m" ] && continue
        { time "$BIN/harness" synth --arch "${s%%:*}" --preset "${s#*:}" --quant q4_k_m --seed 0 \
            --fast-random "${SYNTH_EXTRA[@]}" --out "$m.part" && mv "$m.part" "$m"; } >> "$OUT/synth.log" 2>&1
    done
    log "synth: $(cd "$MODELS" && ls -s --block-size=M -- *.gguf | tr '\n' ' ')"
}

# begin NAME SECONDS [CAP]: whether a step that needs SECONDS may start before the deadline (less
# the packing's 20 s); if so TIMEOUT is the command prefix that stops it (SIGINT) at the deadline
# or after CAP seconds, else the skip is logged and noted for summary.md. `end RC` logs its exit and time and keeps
# its window (windows.tsv) so each measurement's clocks can be told apart.
begin() {
    STEP_NAME=$1
    local budget=$(($(left) - 20))
    if [ "$budget" -lt "$2" ]; then
        log "$1: SKIPPED (needs ~$2 s, $budget s left)"
        echo "- $1: skipped, ~$2 s needed and $budget s left" >> "$WORK/skipped.md"
        return 1
    fi
    [ -z "${3:-}" ] || [ "$budget" -lt "$3" ] || budget=$3
    TIMEOUT=(timeout -s INT -k 15 "$budget")
    STEP_START=$SECONDS
    STEP_T0=$(date +%s.%N)
}
end() {
    printf '%s\t%s\t%s\n' "$STEP_NAME" "$STEP_T0" "$(date +%s.%N)" >> "$WORK/windows.tsv"
    log "$STEP_NAME: exit $1, $((SECONDS - STEP_START)) s"
    [ "$1" != 124 ] && [ "$1" != 130 ] ||
        echo "- $STEP_NAME: stopped at its limit after $((SECONDS - STEP_START)) s (exit $1)" >> "$WORK/skipped.md"
}

# Call B0 carries the first part of call B's Vulkan server (B's carry alone would pass what a
# call may carry with the working tree); it waits in VK_PARTS for B, on the same machine. A call
# that carries parts itself (a dry run, or an older staging) leaves them there the same way.
stage_vk_part() {
    ls target/h200-vk/*.part* > /dev/null 2>&1 || return 0
    [ -f target/h200-vk/SHA256SUMS ] || rm -rf "$VK_PARTS" # call A: no stale part of another staging
    mkdir -p "$VK_PARTS" && cp target/h200-vk/*.part* "$VK_PARTS/"
    log "staged $(cd "$VK_PARTS" && ls | tr '\n' ' ')in $VK_PARTS for call B"
}

# The SM clock (and memory clock, power, temperature) every 100 ms for the whole call.
clocks_start() {
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
            --format=csv,noheader,nounits -lms 100 > "$OUT/clocks.csv" 2>&1 &
        CLOCKS=$!
    else
        echo "no nvidia-smi here" > "$OUT/clocks.csv"
        CLOCKS=
    fi
}
clocks_stop() { [ -z "${CLOCKS:-}" ] || kill "$CLOCKS" 2> /dev/null; }

# threeway_packet NAME MODEL [threeway args...]: one `harness threeway` packet into
# $RUNS/<UTC>-threeway-NAME (stopped by begin's TIMEOUT: SIGINT, and threeway keeps what it
# measured), validated, with its report; the arms' p50s go into summary.md.
threeway_packet() {
    local name=$1 model=$2
    shift 2
    local run
    run=$RUNS/$(date -u +%Y%m%dT%H%M%SZ)-threeway-$name
    "${TIMEOUT[@]}" "$BIN/harness" threeway --model "$model" --out "$run" --flash-attn on \
        --python python3 --model-origin "$MODEL_ORIGIN" "$@" > "$WORK/threeway-$name.log" 2>&1
    local rc=$?
    if [ -f "$run/packet.json" ]; then
        "$BIN/harness" validate "$run/packet.json" > "$run/logs/validate.log" 2>&1
        echo "validate exit $?" >> "$run/logs/validate.log"
        "$BIN/harness" report "$run/packet.json" --out "$run/report" > /dev/null 2>&1
        tail -1 "$run/logs/validate.log"
    fi
    cp "$WORK/threeway-$name.log" "$run/logs/threeway.log" 2> /dev/null
    tail -4 "$WORK/threeway-$name.log"
    return $rc
}

# One row per arm of every packet: decode, prefill, TTFT p50 and the ratio to llama.cpp.
summarize_packets() {
    python3 - "$RUNS" <<'PY'
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(f"{sys.argv[1]}/*/packet.json")):
    p = json.load(open(path))
    env, ratios = p["envelope"], (p.get("ratios") or {}).get("by_arm", {})
    for a in p["arms"]:
        s, r = a.get("summary") or {}, ratios.get(a["arm"], {})
        num = lambda k: (s.get(k) or {}).get("p50")
        f = lambda v, fmt: fmt.format(v) if isinstance(v, (int, float)) else "—"
        rows.append(f"| {os.path.basename(os.path.dirname(path))} | {a['arm']} | {a['status']['state']} | "
                    f"{env['n_ctx']} / {env['n_out']} × {env['n_prompts']} | {f(num('decode_tok_s'), '{:.1f}')} | "
                    f"{f(num('prefill_tok_s'), '{:.0f}')} | {f((num('ttft_s') or 0) * 1e3 or None, '{:.1f}')} | "
                    f"{f(r.get('decode_tok_s_p50'), '{:.3f}')} | {f(r.get('prefill_tok_s_p50'), '{:.3f}')} |")
print("| run | arm | state | prompt / out × prompts | decode tok/s p50 | prefill tok/s p50 | TTFT p50 ms | decode ÷ llama.cpp | prefill ÷ llama.cpp |")
print("|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
PY
}

# fak's bench JSONs and llama-bench's JSONL, one table each; the 8B's depth-128 decode during the
# build against the control on the quiet machine.
summarize_bench() {
    python3 - "$WORK/bench" "$WORK/llama-bench" <<'PY'
import glob, json, os, sys
print("## fak: harness bench (decode at each depth; prefill of the depth's prompt)")
print("| model | phase | depth | decode tok/s | ms/token | roofline | dispatches / ops per token | encode µs/token | prefill tok/s (tokens in chunks) |")
print("|---|---|---|---|---|---|---|---|---|")
decode = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/bench-*.json")):
    # bench-<model>-<phase>-d<depths>.json
    name = os.path.basename(path)[len("bench-"):-len(".json")].rsplit("-d", 1)[0]
    phase = next((p for p in ("during-build", "quiet") if name.endswith("-" + p)), "")
    model = name[:len(name) - len(phase) - 1] if phase else name
    try:
        b = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"| {model} | {phase} | unreadable: {e} |")
        continue
    for d in b["depths"]:
        p = d.get("prefill") or {}
        chunks = [c.get("tokens") for c in p.get("chunks", [])]
        decode[(model, phase, d["depth"])] = d["decode_us_per_token"]
        print(f"| {model} | {phase} | {d['depth']} | {d['decode_tokens_per_s']:.1f} | "
              f"{d['decode_us_per_token'] / 1e3:.2f} | {100 * d['decode_roofline_fraction']:.0f} % | "
              f"{d['dispatches_per_step']} / {d['ops_per_step']} | {d['encode_us_per_token']:.0f} | "
              f"{d['prefill_tokens_per_s']:.0f} ({p.get('tokens')} in {chunks}) |")
for (model, phase, depth), us in decode.items():
    during = decode.get((model, "during-build", depth))
    if phase == "quiet" and during:
        print(f"\nControl: {model} decode at depth {depth} {during / 1e3:.3f} ms/token during the build, "
              f"{us / 1e3:.3f} quiet ({100 * (during / us - 1):+.1f} %).")
print("\n## llama.cpp CUDA: llama-bench (same files)")
print("| model | test | t/s | ± | repetitions |")
print("|---|---|---|---|---|")
for path in sorted(glob.glob(f"{sys.argv[2]}/*.jsonl")):
    for line in open(path, errors="replace"):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        test = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + \
            (f" @ d{r['n_depth']}" if r.get("n_depth") else "")
        print(f"| {os.path.basename(path)[:-6]} | {test} | {r['avg_ts']:.1f} | {r['stddev_ts']:.1f} | "
              f"{len(r.get('samples_ts') or [])} |")
print()
PY
}

# SM clock min / median / max over each step's window (clocks.csv against windows.tsv).
summarize_clocks() {
    python3 - "$OUT/clocks.csv" "$WORK/windows.tsv" <<'PY'
import datetime, statistics, sys
samples = []
for line in open(sys.argv[1], errors="replace"):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        sm = float(f[1])
    except (ValueError, IndexError):
        continue
    try:
        power = float(f[3])
    except (ValueError, IndexError):  # "[N/A]" on some boards
        power = float("nan")
    samples.append((t, sm, power))
print("| step | SM MHz min / median / max | power W median | samples |")
print("|---|---|---|---|")
try:
    windows = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
except FileNotFoundError:
    windows = []
for name, a, b in windows:
    w = [s for s in samples if float(a) <= s[0] <= float(b)]
    if not w:
        print(f"| {name} | — | — | 0 |")
        continue
    sm = sorted(s[1] for s in w)
    power = [s[2] for s in w if s[2] == s[2]]
    power = f"{statistics.median(power):.0f}" if power else "—"
    print(f"| {name} | {sm[0]:.0f} / {statistics.median(sm):.0f} / {sm[-1]:.0f} | {power} | {len(w)} |")
PY
}

# Packs the run folders and the call's own logs into $OUT/NAME.tgz and prints the summary.
pack() {
    clocks_stop
    {
        echo "# ${ACCEPT_CALL:-acceptance}: harness $FAK_COMMIT, $(left) s before the deadline"
        echo
        cat "$WORK"/summary-*.md 2> /dev/null
        echo "## Packets"
        summarize_packets
        echo
        echo "## SM clocks per step"
        summarize_clocks
        echo
        echo "## Skipped or stopped"
        cat "$WORK/skipped.md" 2> /dev/null || echo "nothing"
    } > "$OUT/summary.md" 2>&1
    # Each run folder keeps the call's own logs (as machine.md says a committed run does).
    local run
    for run in "$RUNS"/*/; do
        [ -d "$run/logs" ] || continue
        cp "$OUT/steps.log" "$OUT/gpu.csv" "$run/logs/" 2> /dev/null
        cp "$OUT/synth.log" "$run/logs/" 2> /dev/null
        [ -s "$OUT/llama-build.log" ] && tail -3 "$OUT/llama-build.log" > "$run/logs/llama-build-tail.log"
    done
    mkdir -p "$WORK/call-logs"
    cp "$OUT"/*.log "$OUT"/gpu.csv "$OUT/summary.md" "$WORK/windows.tsv" "$WORK"/selftest.* \
        "$WORK/call-logs/" 2> /dev/null
    tar czf "$OUT/$1.tgz" -C "$WORK" runs call-logs $(cd "$WORK" && ls -d bench llama-bench 2> /dev/null)
    log "packed $1.tgz ($(du -h "$OUT/$1.tgz" | cut -f1))"
    cat "$OUT/summary.md"
}
