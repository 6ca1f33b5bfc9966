#!/usr/bin/env python3
"""The plan of the CUDA topk_rows kernel (src/backends/cuda/sampling.cu), emulated in
Python: 64-bit keys ordering (value descending, index ascending; -0.0 as +0.0; NaN and
padding 0), blocks of 8,192 keys (thread t's j-th key is index t + 256 j), each block's
k largest found by the kernel's radix select over the keys at or above its floor (each
warp's ceil(k / 8)-th largest thread maximum, the least of them) (a byte a pass from the top, stopping when
the chosen bin holds exactly the keys still wanted), then keys above the prefix and
keys equal to it into what is left; levels of 8,192 // k lists until one is left, that
one sorted by the kernel's 256-entry bitonic network. Checked against a full sort on
rows with ties, signed zeros, -inf and NaN. A check of the plan, not of the kernel: the
kernel's own tests are test_cuda_sampling's TopkRows* (GPU). Run: python3 this."""
import math, random, struct

THREADS, PER = 256, 32
KEYS = THREADS * PER


def key(v, i):
    if math.isnan(v):
        return 0
    if v == 0.0:
        v = 0.0
    u = struct.unpack('<I', struct.pack('<f', v))[0]
    u = (~u & 0xFFFFFFFF) if (u & 0x80000000) else (u | 0x80000000)
    return (u << 32) | (0xFFFFFFFF - i)


def block_floor(keys, k):
    """The kernel's block_floor: each warp's q-th largest thread maximum, q = ceil(k / 8),
    the least of the 8 offers. Thread t holds keys t + 256 j."""
    maxima = [max(keys[t + THREADS * j] for j in range(PER)) for t in range(THREADS)]
    q = (k + 7) // 8
    return min(sorted(maxima[32 * w:32 * w + 32], reverse=True)[q - 1] for w in range(THREADS // 32))


def select_top(keys, k, use_floor=True):
    """The block's k largest keys, in slot order (keys above the prefix, then equal)."""
    assert len(keys) == KEYS and k <= len(keys)
    floor = block_floor(keys, k) if use_floor else 0
    select_top.counted = sum(1 for x in keys if x >= floor)
    prefix = mask = 0
    need = k
    passes = 0
    for shift in range(56, -1, -8):
        passes += 1
        hist = [0] * 256
        for x in keys:
            if x >= floor and x & mask == prefix:
                hist[(x >> shift) & 0xFF] += 1
        ge = 0
        found = None
        for t in range(256):  # thread t holds bin 255 - t; ge is the inclusive sum
            here = hist[255 - t]
            ge += here
            if ge >= need and ge - here < need:
                assert found is None
                found = (255 - t, need - (ge - here), here)
        digit, need, bin_ = found
        prefix |= digit << shift
        mask |= 0xFF << shift
        if bin_ == need:
            break
    top = [x for x in keys if x >= floor and x > prefix]
    assert len(top) <= k  # the kernel's slots
    top += [x for x in keys if x >= floor and x == prefix][: k - len(top)]
    assert len(top) == k
    return top, passes


def bitonic_desc(s):
    n = len(s)
    size = 2
    while size <= n:
        stride = size // 2
        while stride > 0:
            for t in range(n // 2):
                i = 2 * t - (t & (stride - 1))
                j = i + stride
                if (s[i] < s[j]) == ((i & size) == 0):
                    s[i], s[j] = s[j], s[i]
            stride //= 2
        size *= 2
    return s


def topk(x, k):
    n = len(x)
    lists = []
    max_passes = 0
    for seg in range((n + KEYS - 1) // KEYS):
        block = [key(x[i], i) if i < n else 0 for i in range(seg * KEYS, seg * KEYS + KEYS)]
        top, p = select_top(block, k)
        max_passes = max(max_passes, p)
        lists.append(top)
    per = KEYS // k
    while len(lists) > 1:
        nxt = []
        for g in range(0, len(lists), per):
            block = [y for l in lists[g:g + per] for y in l]
            block += [0] * (KEYS - len(block))
            top, p = select_top(block, k)
            max_passes = max(max_passes, p)
            nxt.append(top)
        lists = nxt
    final = lists[0] + [0] * (THREADS - k)
    return bitonic_desc(final)[:k], max_passes


def expected(x, k):
    keys = sorted((key(v, i) for i, v in enumerate(x)), reverse=True)
    return (keys + [0] * k)[:k]


def row(n, kind, rng):
    if kind == 0:  # logits
        return [rng.gauss(0, 3) for _ in range(n)]
    if kind == 1:  # heavy ties
        return [float(rng.randint(-3, 3)) for _ in range(n)]
    if kind == 2:  # signed zeros and -inf
        return [rng.choice([0.0, -0.0, -math.inf, 1.5]) for _ in range(n)]
    if kind == 3:  # mostly -inf, a few NaN
        return [rng.choice([-math.inf] * 8 + [math.nan, 2.0]) for _ in range(n)]
    if kind == 4:  # subnormals
        return [rng.uniform(-1e-38, 1e-38) for _ in range(n)]
    # the largest values at every 256th index from 5: one thread of each block holds them
    return [rng.uniform(20, 30) if i % 256 == 5 else rng.gauss(0, 3) for i in range(n)]


if __name__ == '__main__':
    rng = random.Random(1)
    cases = 0
    worst = 0
    for n in (1, 3, 255, 256, 8191, 8192, 8193, 20000, 70000):
        for k in (1, 2, 7, 64, 255, 256):
            for kind in range(6):
                x = row(n, kind, rng)
                got, p = topk(x, k)
                worst = max(worst, p)
                assert got == expected(x, k), (n, k, kind)
                cases += 1
    x = [rng.gauss(0, 3) for _ in range(262144)]
    for k in (1, 64, 256):
        got, p = topk(x, k)
        assert got == expected(x, k)
        block = [key(x[i], i) for i in range(KEYS)]
        select_top(block, k)
        print(f'262,144 gaussian logits, k {k}: at most {p} radix passes a block; '
              f'{select_top.counted} of {KEYS} keys at or above the floor of the first block')
    print(f'{cases} cases equal to a full sort; at most {worst} radix passes a block')
