#!/usr/bin/env python3
"""How long a causal prefill step's attention takes in key steps a multiprocessor, by the order
its workgroups take their row tiles (experiments/NOTES.md "attn2k", FAK_ATTN_ORDER).

The model: one workgroup per SM (the flash form's registers), the GPU starting workgroups in
dispatch order (x fastest, then y) as SMs free; a workgroup of row tile i costs its key steps
(the tile's last token's keys over KEY_STEP) plus a fixed cost c (Q's staging, the prologue, the
output) in key steps. Prints per step size the work a multiprocessor, the makespan in today's
order (tile x of kv head y), with x reversed per kv head, and longest first (the kernels'
`tile_and_head` order 1: every kv head of the last tile, then of the one before).

    python3 experiments/attn-flash/tile_order.py [--sms 132] [--rows 128]
"""
import argparse
import heapq


def makespan(costs, sms):
    free = [0.0] * sms
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


def orders(tokens, group, n_kv, rows, key_step, c):
    tiles = -(-tokens * group // rows)
    tile_tokens = rows // group

    def cost(x):
        return -(-min((x + 1) * tile_tokens, tokens) // key_step) + c

    rows_order = [cost(x) for g in range(n_kv) for x in range(tiles)]
    x_reversed = [cost(tiles - 1 - x) for g in range(n_kv) for x in range(tiles)]
    longest = [cost(tiles - 1 - i // n_kv) for i in range(tiles * n_kv)]
    return tiles * n_kv, sum(rows_order), rows_order, x_reversed, longest


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--rows", type=int, default=128, help="rows a tile (GQA-packed)")
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--kv", type=int, default=8)
    a = p.parse_args()
    print("tokens\tc\tworkgroups\twork/SM\trows\tx_reversed\tlongest_first\tcut")
    for tokens in [2048, 1536, 1024, 768, 512, 128]:
        for c in [0, 2, 12]:
            n, work, *arms = orders(tokens, a.group, a.kv, a.rows, 32, c)
            spans = [makespan(arm, a.sms) for arm in arms]
            cut = 1 - spans[2] / spans[0]
            print(f"{tokens}\t{c}\t{n}\t{work / a.sms:.1f}\t"
                  + "\t".join(f"{s:.0f}" for s in spans) + f"\t{cut:.1%}")


if __name__ == "__main__":
    main()
