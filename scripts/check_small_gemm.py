#!/usr/bin/env python3
"""Lane-level emulation of gemm_small.cu's index math in numpy (no GPU needed).

Follows the kernel: which thread stages which 16 bytes where (Staged<T>::src, the
staged row layouts), each lane's B fragments (decode_row), ldmatrix's A fragments,
the m16n8k16 fragment layouts of the PTX ISA, the split ranges, the epilogue and the
split reduction's slab layout; compares with the plain product of values decoded by
an independent element-wise decoder (dequant.cuh's dq<T>). Values stay in float64
(no BF16 rounding), so the two agree to rounding of the sums.
"""
import numpy as np

rng = np.random.default_rng(1)
KROWS, KCHUNK, TOKROW = 128, 64, 144


def f16(b, o):
    return float(np.frombuffer(bytes(b[o:o + 2]), dtype=np.float16)[0])


def kscale(s, j):  # s: the 12 scale bytes
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def dq_q4k(row, i):
    b = row[(i // 256) * 144:]
    e = i % 256
    c, l = e // 64, e % 32
    sc, m = kscale(b[4:16], e // 32)
    byte = b[16 + 32 * c + l]
    q = (byte >> 4) if (e % 64) >= 32 else (byte & 15)
    return f16(b, 0) * sc * q - f16(b, 2) * m


def dq_q6k(row, i):
    b = row[(i // 256) * 210:]
    e = i % 256
    h, r = e // 128, e % 128
    g, l = r // 32, r % 32
    qlb = b[64 * h + l + 32 * (g & 1)]
    low = (qlb & 15) if g < 2 else (qlb >> 4)
    high = (b[128 + 32 * h + l] >> (2 * g)) & 3
    return f16(b, 208) * np.int8(b[192 + e // 16]).item() * ((low | (high << 4)) - 32)


def rand_blocks(t, rows, n_in):
    nb = n_in // 256
    size = 144 if t == "q4k" else 210
    w = rng.integers(0, 256, size=(rows, nb * size), dtype=np.uint8)
    for b in range(nb):  # finite, modest f16 scales
        for off in ((0, 2) if t == "q4k" else (208,)):
            d = np.float16(rng.uniform(-0.01, 0.01)).view(np.uint16)
            w[:, b * size + off] = d & 255
            w[:, b * size + off + 1] = d >> 8
    return w


def planes_row_bytes(n_in):
    return ((n_in // 256) * 210 + 15) // 16 * 16


def repack_planes(w, n_in):  # repack_q6k_planes_kernel
    nb = n_in // 256
    rows = w.shape[0]
    out = np.zeros((rows, planes_row_bytes(n_in)), dtype=np.uint8)
    for b in range(nb):
        blk = w[:, b * 210:(b + 1) * 210]
        out[:, b * 128:b * 128 + 128] = blk[:, :128]
        out[:, nb * 128 + b * 64:nb * 128 + b * 64 + 64] = blk[:, 128:192]
        out[:, nb * 192 + b * 16:nb * 192 + b * 16 + 16] = blk[:, 192:208]
        out[:, nb * 208 + 2 * b:nb * 208 + 2 * b + 2] = blk[:, 208:210]
    return out


class Q4K:
    row_bytes_staged, pieces, slots = 48, 3, 6

    @staticmethod
    def src(kc, piece, nb):
        b = (kc >> 2) * 144
        return b if piece == 0 else b + 16 + 32 * (kc & 3) + 16 * (piece - 1)

    @staticmethod
    def decode_row(r, t, kc, nb):
        """r: the staged row (48 bytes). Returns b[ks][j] as (lo, hi) value pairs."""
        words = lambda o: int.from_bytes(bytes(r[o:o + 4]), "little")
        c = kc & 3
        d, dmin = f16(r, 0), f16(r, 2)
        sc0, m0 = kscale(r[4:16], 2 * c)
        sc1, m1 = kscale(r[4:16], 2 * c + 1)
        da, ma, db, mb = d * sc0, dmin * m0, d * sc1, dmin * m1
        v = lambda dd, mm, q: dd * (q & 15) - mm
        sh = 16 * (t & 1)
        qs = 16 + 4 * (t >> 1)
        b = [[None, None] for _ in range(4)]
        for kk in range(2):
            u0, u1 = words(qs + 16 * kk) >> sh, words(qs + 16 * kk + 8) >> sh
            b[kk][0] = (v(da, ma, u0), v(da, ma, u0 >> 8))
            b[kk][1] = (v(da, ma, u1), v(da, ma, u1 >> 8))
            b[kk + 2][0] = (v(db, mb, u0 >> 4), v(db, mb, u0 >> 12))
            b[kk + 2][1] = (v(db, mb, u1 >> 4), v(db, mb, u1 >> 12))
        return b


class Q6KPlanes:
    row_bytes_staged, pieces, slots = 144, 8, 4

    @staticmethod
    def src(kc, piece, nb):
        b, h = kc >> 2, (kc & 3) >> 1
        if piece < 4:
            return b * 128 + 64 * h + 16 * piece
        if piece < 6:
            return nb * 128 + b * 64 + 32 * h + 16 * (piece - 4)
        if piece == 6:
            return nb * 192 + b * 16
        return (nb * 208 + 2 * b) & ~15

    @staticmethod
    def decode_row(r, t, kc, nb):
        words = lambda o: int.from_bytes(bytes(r[o:o + 4]), "little")
        c = kc & 3
        odd = c & 1
        doff = (nb * 208 + 2 * (kc >> 2)) & 15
        dh = f16(r, 112 + doff)
        scw = words(96 + 4 * c)
        sh = 16 * (t & 1)
        ql, qh = 4 * (t >> 1), 64 + 4 * (t >> 1)
        b = [[None, None] for _ in range(4)]
        for ks in range(4):
            ds = dh * ((((scw >> (8 * ks)) & 255) ^ 128) - 128)
            lsh, hsh = 4 * odd, 4 * odd + 2 * (ks >> 1)
            v = lambda l, hb, k: ds * ((((l >> (8 * k + lsh)) & 15) | (((hb >> (8 * k + hsh)) & 3) << 4)) - 32)
            l0, l1 = words(ql + 16 * ks) >> sh, words(ql + 16 * ks + 8) >> sh
            h0, h1 = words(qh + 16 * (ks & 1)) >> sh, words(qh + 16 * (ks & 1) + 8) >> sh
            b[ks][0] = (v(l0, h0, 0), v(l0, h0, 1))
            b[ks][1] = (v(l1, h1, 0), v(l1, h1, 1))
        return b


def stage_weights(S, wrows, row_bytes, row0, n_out, kc, nb):
    """stage_weights<T>: thread i's pieces; rows past n_out as zeros."""
    dst = np.zeros(KROWS * S.row_bytes_staged, dtype=np.uint8)
    for k in range(S.pieces):
        for tid in range(128):
            i = tid + k * 128
            r, piece = i // S.pieces, i % S.pieces
            if row0 + r < n_out:
                o = S.src(kc, piece, nb)
                assert o % 16 == 0 and o + 16 <= row_bytes, (o, row_bytes)
                dst[r * S.row_bytes_staged + 16 * piece:][:16] = wrows[row0 + r][o:o + 16]
    return dst


def stage_tokens(xb, n_tokens, n_in, kc, ktok):
    dst = np.zeros((ktok * TOKROW,), dtype=np.float64)  # indexed in 2-byte units below
    tok = np.zeros((ktok, TOKROW // 2))
    for k in range(ktok * 8 // 128):
        for tid in range(128):
            i = tid + k * 128
            t, piece = i >> 3, i & 7
            if t < n_tokens:
                src = kc * KCHUNK + 8 * piece
                tok[t, 8 * piece:8 * piece + 8] = xb[t, src:src + 8]
    return tok


def ldmatrix_x4(tok, lane_addr):
    """lane_addr[l] = (row, col in values) of the row lane l gives; returns r[lane][j] pairs."""
    out = [[None] * 4 for _ in range(32)]
    for j in range(4):
        for lane in range(32):
            row, col = lane_addr[8 * j + (lane >> 2)]
            c = col + 2 * (lane & 3)
            out[lane][j] = (tok[row, c], tok[row, c + 1])
    return out


def mma(acc, a, b):
    """acc[lane][4] += A·B with the PTX m16n8k16 fragment layouts."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for j, (ro, co) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            A[g + ro, co + 2 * t:co + 2 * t + 2] = a[lane][j]
        B[2 * t:2 * t + 2, g] = b[lane][0]
        B[8 + 2 * t:8 + 2 * t + 2, g] = b[lane][1]
    C = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        acc[lane][0] += C[g, 2 * t]
        acc[lane][1] += C[g, 2 * t + 1]
        acc[lane][2] += C[g + 8, 2 * t]
        acc[lane][3] += C[g + 8, 2 * t + 1]


def run(S, wrows, row_bytes, n_out, n_in, xb, n_tokens, ys, splits):
    ktok = 32 if n_tokens <= 32 else 64
    nb, n_chunks = n_in // 256, n_in // KCHUNK
    tiles = (n_out + KROWS - 1) // KROWS
    y = np.full((n_tokens, ys), 7.0)
    part = np.zeros((tiles, splits, ktok * KROWS))
    for tile in range(tiles):
        row0 = tile * KROWS
        for split in range(splits):
            c0 = split * n_chunks // splits
            nc = (split + 1) * n_chunks // splits - c0
            acc = np.zeros((4, ktok // 16, 4, 32, 4))  # [warp][mt][nt][lane][4]
            for i in range(nc):
                kc = c0 + i
                wst = stage_weights(S, wrows, row_bytes, row0, n_out, kc, nb)
                tok = stage_tokens(xb, n_tokens, n_in, kc, ktok)
                for warp in range(4):
                    b = [[None] * 32 for _ in range(4)]  # [nt][lane] -> decode_row result
                    for nt in range(4):
                        for lane in range(32):
                            r = (warp * 32 + nt * 8 + (lane >> 2)) * S.row_bytes_staged
                            b[nt][lane] = S.decode_row(wst[r:r + S.row_bytes_staged], lane & 3, kc, nb)
                    for ks in range(4):
                        for mt in range(ktok // 16):
                            addr = []
                            for lane in range(32):
                                row = (lane & 7) + 8 * ((lane >> 3) & 1) + mt * 16
                                colb = 16 * (lane >> 4) + 32 * ks  # bytes
                                assert colb % 16 == 0
                                addr.append((row, colb // 2))
                            a = ldmatrix_x4(tok, addr)
                            for nt in range(4):
                                mma(acc[warp][mt][nt], a, [b[nt][lane][ks] for lane in range(32)])
            for warp in range(4):
                for mt in range(ktok // 16):
                    for nt in range(4):
                        for hf in range(2):
                            for lane in range(32):
                                t = mt * 16 + (lane >> 2) + 8 * hf
                                col = warp * 32 + nt * 8 + 2 * (lane & 3)
                                v0, v1 = acc[warp][mt][nt][lane][2 * hf], acc[warp][mt][nt][lane][2 * hf + 1]
                                if splits == 1:
                                    if t >= n_tokens:
                                        continue
                                    if row0 + col < n_out:
                                        y[t, row0 + col] = v0
                                    if row0 + col + 1 < n_out:
                                        y[t, row0 + col + 1] = v1
                                else:
                                    part[tile, split, t * KROWS + col] = v0
                                    part[tile, split, t * KROWS + col + 1] = v1
        if splits > 1:  # the last block's reduction: 4 values a load, kSumGroups loads a thread
            groups, n4 = 4, n_tokens * (KROWS // 4)
            part4 = part[tile].reshape(splits, -1, 4)
            for tid in range(128):
                for i0 in range(tid, n4, 128 * groups):
                    s = np.zeros((groups, 4))
                    for k in range(splits):
                        for u in range(groups):
                            i = i0 + u * 128
                            if i < n4:
                                s[u] += part4[k, i]
                    for u in range(groups):
                        i = i0 + u * 128
                        if i >= n4:
                            continue
                        t, row = i // (KROWS // 4), row0 + 4 * (i % (KROWS // 4))
                        for j in range(4):
                            if row + j < n_out:
                                y[t, row + j] = s[u][j]
    return y


def check(kind, n_out, n_in, n_tokens, splits, ys_pad=3):
    wraw = rand_blocks(kind, n_out, n_in)
    if kind == "q4k":
        S, wrows, rb = Q4K, wraw, (n_in // 256) * 144
        ref_w = np.array([[dq_q4k(wraw[r], i) for i in range(n_in)] for r in range(n_out)])
    else:
        S, wrows, rb = Q6KPlanes, repack_planes(wraw, n_in), planes_row_bytes(n_in)
        ref_w = np.array([[dq_q6k(wraw[r], i) for i in range(n_in)] for r in range(n_out)])
    xb = rng.standard_normal((n_tokens, n_in))
    ys = n_out + ys_pad
    y = run(S, wrows, rb, n_out, n_in, xb, n_tokens, ys, splits)
    ref = xb @ ref_w.T
    err = np.abs(y[:, :n_out] - ref).max() / max(np.abs(ref).max(), 1e-30)
    pad_ok = np.all(y[:, n_out:] == 7.0)
    print(f"{kind} n_out={n_out} n_in={n_in} T={n_tokens} splits={splits}: max rel err {err:.2e} pad kept {pad_ok}")
    assert err < 1e-12 and pad_ok


if __name__ == "__main__":
    check("q4k", 130, 256, 17, 1)
    check("q6k", 130, 256, 33, 1)
    check("q4k", 40, 1024, 20, 2)
    check("q6k", 9, 1024, 64, 2)
    check("q4k", 128, 768, 32, 1)
    check("q4k", 200, 2048, 64, 4)
    check("q6k", 131, 2048, 45, 3)
    check("q6k", 5, 768, 17, 1)
    print("ok")
