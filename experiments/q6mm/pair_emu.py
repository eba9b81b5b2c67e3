# The Q6_K pair tasks of wgsl/matmul_x16.wgsl (RAW_Q6K = 2: fetch_pair, put_q6k_pair) emulated on
# bytes — the same word indices, funnel shifts, nibble and high-bit shifts, scale bytes and d —
# against ggml's Q6_K dequantization (written out here from its block layout), element by
# element and bit for bit in f32. Rows of 5 blocks after a 6-byte prefix, so blocks start at both
# 2-byte alignments a 210-byte block can have. The GPU kernel itself needs cooperative matrices
# (not on lavapipe): this checks its indexing before the device does.
#   python3 experiments/q6mm/pair_emu.py   (numpy; prints "mismatches 0 of 3840")
import random, struct
import numpy as np
random.seed(1)
nb = 5  # blocks per row
rows = 3
BLOCK = 210
prefix = 6  # bytes before the weight: w_byte (the binding window's skip), 2-aligned
data = bytearray(random.getrandbits(8) for _ in range(prefix + rows * nb * BLOCK + 8))
for r in range(rows):
    for b in range(nb):
        at = prefix + (r * nb + b) * BLOCK + 208
        data[at:at+2] = struct.pack('<e', random.uniform(-1, 1))
def word(i):
    return struct.unpack_from('<I', data, 4 * i)[0]
def dequant_row(r):
    out = []
    for b in range(nb):
        base = prefix + (r * nb + b) * BLOCK
        ql = data[base:base+128]; qh = data[base+128:base+192]
        sc = struct.unpack_from('<16b', data, base + 192)
        d = np.float32(struct.unpack_from('<e', data, base + 208)[0])
        y = [0.0] * 256
        for n in range(2):
            for l in range(32):
                is_ = l // 16
                q1 = ((ql[64*n+l] & 0xF) | (((qh[32*n+l] >> 0) & 3) << 4)) - 32
                q2 = ((ql[64*n+l+32] & 0xF) | (((qh[32*n+l] >> 2) & 3) << 4)) - 32
                q3 = ((ql[64*n+l] >> 4) | (((qh[32*n+l] >> 4) & 3) << 4)) - 32
                q4 = ((ql[64*n+l+32] >> 4) | (((qh[32*n+l] >> 6) & 3) << 4)) - 32
                for k, q in enumerate([q1, q2, q3, q4]):
                    y[128*n + l + 32*k] = np.float32(np.float32(d * np.float32(sc[8*n + is_ + 2*k])) * np.float32(q))
        out += y
    return out
def funnel(lo, hi, shift):
    return lo if shift == 0 else ((lo >> shift) | (hi << (32 - shift))) & 0xffffffff
def unpack4(x):
    return [(x >> (8*j)) & 0xff for j in range(4)]
def i8(b):
    return b - 256 if b >= 128 else b
PAIRS_K = 2
row_bytes = nb * BLOCK
bad = 0
for r in range(rows):
    want = dequant_row(r)
    got = [None] * (nb * 256)
    for k0 in range(0, nb * 256, 64):
        for j in range(PAIRS_K):
            i = r * PAIRS_K + j   # r0 = 0
            block = prefix + (i // PAIRS_K) * row_bytes + (k0 // 256) * BLOCK
            e0 = k0 % 256; side = e0 // 128; l = 16 * (i % PAIRS_K)
            ql = (block + 64*side + l) // 4; ql_odd = ql + 8
            qh = (block + 128 + 32*side + l) // 4
            scale_at = block + 192 + (e0 + l) // 16
            raw = [word(ql+t) for t in range(5)] + [word(ql_odd+t) for t in range(5)] + [word(qh+t) for t in range(5)] + [word(scale_at // 4), word((scale_at + 2) // 4), word((block + 208) // 4)]
            qlw, qlo, qhw = raw[0:5], raw[5:10], raw[10:15]
            quarter = (e0 % 128) // 32
            nibble = 4 if quarter >= 2 else 0
            shift = 8 * (block & 3)
            dbits = (raw[17] >> (16 * (((block + 208) >> 1) & 1))) & 0xffff
            d = np.float32(np.frombuffer(struct.pack('<H', dbits), dtype=np.float16)[0])
            sc = lambda w, at: np.float32(i8((w >> (8 * (at & 3))) & 0xff))
            a = np.float32(d * sc(raw[15], scale_at)); a_odd = np.float32(d * sc(raw[16], scale_at + 2))
            for c in range(4):
                high = funnel(qhw[c], qhw[c+1], shift)
                low = (funnel(qlw[c], qlw[c+1], shift) >> nibble) & 0x0f0f0f0f
                he = ((high >> (2*quarter)) & 0x03030303) << 4
                lo2 = (funnel(qlo[c], qlo[c+1], shift) >> nibble) & 0x0f0f0f0f
                ho = ((high >> (2*quarter + 2)) & 0x03030303) << 4
                for t, q in enumerate(unpack4(low | he)):
                    got[k0 + l + 4*c + t] = np.float32(a * np.float32(q - 32))
                for t, q in enumerate(unpack4(lo2 | ho)):
                    got[k0 + 32 + l + 4*c + t] = np.float32(a_odd * np.float32(q - 32))
    for e in range(nb * 256):
        if got[e] is None or got[e] != want[e]:
            bad += 1
            if bad < 5: print('row', r, 'e', e, got[e], want[e])
print('mismatches', bad, 'of', rows * nb * 256)
