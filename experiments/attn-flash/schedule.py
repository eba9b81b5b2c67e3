"""The schedule of wgsl/attn_prefill_flash.wgsl emulated for one row block, step by step (numpy):
the P·V one step behind S, the rescale mark read at barrier A (and α kept from the last
softmax), K(t + 1) and V(t) stored after barrier B, rows past the split's end clamped to its last
key, the first P·V of zero P and V, Q/K/V/P rounded to f16. Random rows, positions and prompts
(the cache tail poisoned with NaN), slack 0 and 8, against exact softmax attention on the same
f16-rounded inputs, whole and in key splits (1, 2, 3, 64 of runs of 64 keys, merged as
attn_combine.wgsl does): the worst |o / l − want| must stay at P's f16 rounding (~5e-4; it does).
Planting a bug in the schedule (no rescale, or the mark set for this step instead of the next)
gives errors of ~650. Run: FAK_PYTHON experiments/attn-flash/schedule.py (numpy)."""
import numpy as np
NEG = -3.0e38
def flash(q, k, v, pos, begin, end, BN=32, slack=8.0):
    rows, d = q.shape
    f16 = lambda x: x.astype(np.float16).astype(np.float32)
    qh = f16(q)
    m = np.full(rows, NEG, np.float32); l = np.zeros(rows, np.float32)
    alpha = np.ones(rows, np.float32); o = np.zeros((rows, d), np.float32)
    mark = 0
    P = np.zeros((rows, BN), np.float32); V = np.zeros((BN, d), np.float32)
    def rows_of(t0):  # clamped key rows
        keys = np.minimum(t0 + np.arange(BN), end - 1)
        return keys
    Kt = f16(k[rows_of(begin)])
    k0 = begin
    while True:
        # A
        if mark == k0 + 1:
            o = o * alpha[:, None]
        o = o + P @ V                     # P(t-1) V(t-1)
        if k0 >= end:
            break
        S = qh @ Kt.T                     # S(t)
        # B: store K(t+1), V(t)
        knext = k0 + BN
        Vt = f16(v[rows_of(k0)])
        if knext < end:
            Kt = f16(k[rows_of(knext)])
        V = Vt
        keys = k0 + np.arange(BN)
        s = np.where(keys[None, :] > pos[:, None], NEG, S)
        smax = s.max(axis=1)
        alpha = np.ones(rows, np.float32)
        move = smax > m + slack
        alpha[move] = np.exp2(m[move] - smax[move]) if move.any() else alpha[move]
        need = move & (l > 0)
        m = np.where(move, smax, m)
        if need.any():
            mark = knext + 1
        p = np.where(s == NEG, 0.0, f16(np.exp2(s - m[:, None])))
        P = p.astype(np.float32)
        l = l * alpha + P.sum(axis=1)
        k0 = knext
    return o, m, l

def key_split(limit, index, n, run=64):
    steps = (limit + run - 1) // run
    per = (steps + n - 1) // n * run
    begin = min(index * per, limit)
    return begin, min(begin + per, limit)

f16 = lambda x: x.astype(np.float16).astype(np.float32)
rng = np.random.default_rng(1)
worst = 0
for trial in range(200):
    rows = 16; d = 32
    n = int(rng.integers(1, 200)); start = int(rng.integers(0, 300))
    keys_total = start + n
    scale = float(rng.choice([0.5, 3.0, 12.0]))
    q = rng.standard_normal((rows, d)).astype(np.float32) * scale
    k = rng.standard_normal((keys_total + 64, d)).astype(np.float32)
    v = rng.standard_normal((keys_total + 64, d)).astype(np.float32)
    k[keys_total:] = np.nan; v[keys_total:] = np.nan   # poisoned tail
    pos = start + np.sort(rng.integers(0, n, rows))
    limit = int(pos.max()) + 1
    for slack in [0.0, 8.0]:
        for n_split in [1, 2, 3, 64]:
            # Each split's partial (o, m, l), merged as attn_combine.wgsl does.
            parts = [flash(q, k, v, pos, *key_split(limit, s_, n_split), slack=slack)
                     for s_ in range(n_split) if key_split(limit, s_, n_split)[0] < limit]
            M = np.max([m for _, m, _ in parts], axis=0)
            w = [np.exp2(m - M) for _, m, _ in parts]
            L = sum(wi * l for wi, (_, _, l) in zip(w, parts))
            O = sum(wi[:, None] * o for wi, (o, _, _) in zip(w, parts))
            for r in range(rows):
                sc = f16(q[r]) @ f16(k[:pos[r] + 1]).T
                p_ = np.exp2(sc - sc.max()); p_ /= p_.sum()
                want = p_ @ f16(v[:pos[r] + 1])
                got = O[r] / L[r]
                assert np.isfinite(got).all(), (trial, r)
                worst = max(worst, np.abs(got - want).max())
print("worst abs err", worst)
