# The flash kernel's loop control under key runs (wgsl/attn_prefill_flash.wgsl, RUN_KEYS = 512;
# experiments/NOTES.md "detcoop"), transcribed: the fold test at a step's top (the step after a
# run's first), the softmax's restart (a run's first step), P·V one step behind S, the final
# P·V. Checks, for splits from 0, 512, 1024, 1536 to every end up to 3000 keys, that each fold
# and the final store see exactly one run's steps, in order, and that every step's softmax
# belongs to its key's run. `python3 run_folds.py` prints "ok N".
R, BN = 512, 32
def starts_run(k0, b, e):
    return k0 > b and k0 < e and k0 % R == 0
def run(b, e):
    O, folds, soft_run, p_prev = [], [], 0, None
    run_of_row = b // R  # the softmax state's run
    k0 = b
    while True:
        if k0 > b + BN and starts_run(k0 - BN, b, e):
            folds.append(O); O = []
        if starts_run(k0, b, e):
            run_of_row = k0 // R
        if p_prev is not None:
            O.append(p_prev)
        if k0 >= e:
            break
        p_prev = (k0, run_of_row)
        k0 += BN
    return folds + [O]
def check(b, e):
    groups = run(b, e)
    for g in groups:
        runs = {r for _, r in g}
        assert len(runs) == 1, (b, e, groups)
        r = runs.pop()
        steps = [k for k, _ in g]
        assert all(k // R == r for k in steps), (b, e, g)
        assert steps == list(range(max(b, r * R), min(e, (r + 1) * R), BN)), (b, e, g)
    assert [g[0][1] for g in groups] == list(range(b // R, (e - 1) // R + 1)), (b, e)
n = 0
for b in range(0, 2048, 512):
    for e in range(b + 1, 3000):
        check(b, e); n += 1
print("ok", n)
