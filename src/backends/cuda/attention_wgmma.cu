// Flash attention on Hopper's warpgroup MMA for Gemma 4's head sizes, 256 (sliding
// layers) and 512 (full layers), over an F16 KV cache: attention_tile.cu's
// contract, planner and loop (runs of rows, key tiles gathered through the block
// table by cp.async, online softmax in log2 units) with the products on wgmma.
//
// Why: attention_tile.cu feeds mma.sync through ldmatrix, and every warp loads its
// own copy of each K and V fragment: at head size 512 one ldmatrix per two MMAs,
// which shared memory cannot serve at the tensor cores' rate (pp4096: 142 TFLOP/s at
// D = 512, 155 at D = 256; docs/performance.md). wgmma reads K and V from shared
// memory once per warpgroup (64 rows) through descriptors, without registers.
//
//   D    BM  BN  warpgroup w (of 2) computes
//   256  128 64  rows 64w .. 64w + 63: S = 64 × 64 keys, O = 64 × 256
//   512   64 64  all 64 rows: S of keys 32w .. 32w + 31, O of columns 256w .. 256w + 255
//
// At D = 512 the accumulators of 64 rows × 512 columns would not fit one
// warpgroup's registers, so the two split the columns of O and the keys of S, and
// exchange row maxima and P (F16) through shared memory, as attention_tile.cu's two
// warps per row group do. At D = 256 P goes from the S accumulators straight into
// the A registers of P·V (the m16n8 C and A fragment layouts match).
//
// Shared memory holds Q, K and V in the 128-byte swizzle (mma.cuh): 64-value column
// blocks of 128-byte rows, the 16-byte piece c of row r at c ^ (r % 8). Q·Kᵀ reads
// Q and K K-major (a k16 step is 32 bytes into a row); P·V reads V N-major (rows of
// 64 head-dim values, the next 64 one block further: LBO). The loads run as in
// attention_tile.cu: V streams in during Q·Kᵀ and the softmax, the next K during P·V.
#include <cfloat>

#include "backends/cuda/attention_common.cuh"

namespace hf2q::cuda::attn {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kKeys = 64;      // BN

template <int D>
struct WgShape {
    static constexpr int kRows = D == 512 ? 64 : 128;     // BM (attention_tile.cu's tile_rows)
    static constexpr int kSplit = D == 512 ? 2 : 1;       // warpgroups sharing rows
    static constexpr int kSKeys = kKeys / kSplit;         // S columns per warpgroup
    static constexpr int kOCols = D / kSplit;             // O columns per warpgroup (256)
    static constexpr size_t kQBytes = size_t{kRows} * D * 2;
    static constexpr size_t kKvBytes = size_t{kKeys} * D * 2;
    static constexpr size_t kPBytes = kSplit > 1 ? size_t{kRows} * kKeys * 2 : 0;
    static constexpr size_t kRedBytes = 2 * 64 * 4;
    static constexpr size_t kOffBytes = 2 * kKeys * 8;
    static constexpr size_t kSmem = kQBytes + 2 * kKvBytes + kPBytes + kRedBytes + kOffBytes + 1024;  // + alignment
    static_assert(kOCols == 256, "O is 64 × 256 per warpgroup");
    static_assert(kSmem <= 227 * 1024, "tile does not fit in shared memory");
};

// Byte offset of 16-byte piece c8 (values 8·c8 ..) of row r in a swizzled tile of
// `rows` rows: 64-value column blocks of rows × 128 bytes.
__device__ __forceinline__ uint32_t swz(int r, int c8, int rows) {
    return static_cast<uint32_t>((c8 >> 3) * rows * 128 + r * 128 + (((c8 & 7) ^ (r & 7)) << 4));
}

// Starts the copy of one key tile (pool offsets per key, −1: zeros) into a
// swizzled [kKeys][D] tile. Thread t always copies piece t % (D / 8) of rows
// t / (D / 8) + i · kRowStep, so the swizzled offsets are formed once per piece
// index (the loop is unrolled: ncu showed the integer pipe, not the tensor cores,
// as the busiest unit with the per-piece address arithmetic of a generic loop).
template <int D>
__device__ __forceinline__ void issue_kv(unsigned char* tile, const half* __restrict__ pool, const int64_t* off) {
    constexpr int kPieces = D / 8;                  // 16-byte pieces per key row
    constexpr int kRowStep = kThreads / kPieces;    // rows per pass of the block
    constexpr int kPasses = kKeys / kRowStep;
    static_assert(kThreads % kPieces == 0 && kKeys % kRowStep == 0, "whole rows per pass");
    const int c8 = static_cast<int>(threadIdx.x) % kPieces, r0 = static_cast<int>(threadIdx.x) / kPieces;
    unsigned char* const col = tile + (c8 >> 3) * kKeys * 128;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
        const int r = r0 + i * kRowStep;
        const int64_t o = off[r];
        cp_async16(col + r * 128 + (((c8 & 7) ^ (r & 7)) << 4), pool + (o < 0 ? 0 : o + 8 * c8), o < 0 ? 0 : 16);
    }
    cp_async_commit();
}

// Waits for this thread's copies, then makes every thread's copies visible to the
// tensor cores (fence, then the block barrier).
__device__ __forceinline__ void land_copies() {
    cp_async_wait<0>();
    fence_async_smem();
    __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    attention_wgmma_kernel(const ops::AttentionParams p, const int* __restrict__ plan, float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    pdl_begin();
    using W = WgShape<D>;
    constexpr int BM = W::kRows, BN = kKeys, SK = W::kSKeys, NS = SK / 8;
    const half* const k_pool = static_cast<const half*>(p.k_pool);
    const half* const v_pool = static_cast<const half*>(p.v_pool);

    const int h = static_cast<int>(blockIdx.x);
    const int64_t tile = gridDim.y - 1 - blockIdx.y;  // latest tiles first (attention_tile.cu)
    const int* runs = plan + tile * kPlanStride;
    const int n_runs = runs[0];
    if (n_runs == 0) return;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* const qs = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    unsigned char* const ks = qs + W::kQBytes;
    unsigned char* const vs = ks + W::kKvBytes;
    unsigned char* const ps = vs + W::kKvBytes;  // [64][64] F16, swizzled (D = 512)
    float* const red = reinterpret_cast<float*>(ps + W::kPBytes);                        // [2][64]
    int64_t* const rowoff = reinterpret_cast<int64_t*>(ps + W::kPBytes + W::kRedBytes);  // [2][BN]

    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
    const int wg = tid / 128, wq = (tid / 32) % 4;  // warpgroup, warp inside it
    const int g = lane / 4, t4 = lane % 4;
    const int row_base = W::kSplit > 1 ? 0 : 64 * wg;  // the warpgroup's first tile row
    const int key0 = W::kSplit > 1 ? SK * wg : 0;      // its first key of a tile's S
    const int col0 = W::kSplit > 1 ? 256 * wg : 0;     // its first column of O
    const int r0 = row_base + 16 * wq + g;             // this thread's rows r0, r0 + 8
    const int64_t t0 = tile * BM;
    const int64_t kvh = h / (p.n_heads / p.n_kv_heads);
    const int64_t kv_row = p.n_kv_heads * D;
    const int32_t bs = static_cast<int32_t>(p.block_size);

    // Q tile -> F16, swizzled (rows past the batch are zeros).
#pragma unroll 4
    for (int u = tid; u < BM * D / 8; u += kThreads) {
        const int r = u / (D / 8), c8 = u % (D / 8);
        uint4 v = {0, 0, 0, 0};
        if (t0 + r < p.n_tokens) {
            const float4* src = reinterpret_cast<const float4*>(p.q + ((t0 + r) * p.n_heads + h) * D + 8 * c8);
            const float4 a = __ldg(src), b = __ldg(src + 1);
            v = make_uint4(pack_half2(a.x, a.y), pack_half2(a.z, a.w), pack_half2(b.x, b.y), pack_half2(b.z, b.w));
        }
        *reinterpret_cast<uint4*>(qs + swz(r, c8, BM)) = v;
    }
    fence_async_smem();  // the first barrier below publishes Q to the tensor cores

    // Descriptors of the operands' first k16 step. A step adds its byte offset / 16:
    // the start address field is the low 14 bits of address / 16, and shared memory
    // addresses stay below 2^18, so the sum never carries out of it.
    const uint64_t desc_q = smem_desc_sw128(qs + row_base * 128);
    const uint64_t desc_k = smem_desc_sw128(ks + key0 * 128);
    const uint64_t desc_v = smem_desc_sw128_nmajor(vs + (col0 / 64) * BN * 128, BN * 128);
    const uint64_t desc_p = smem_desc_sw128(ps);

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};  // as in attention_tile.cu

    for (int ri = 0; ri < n_runs; ++ri) {
        const int rb = runs[1 + 2 * ri], re = runs[2 + 2 * ri];
        const int32_t* table = p.tables[t0 + rb];
        const int32_t p_first = p.pos[t0 + rb];
        const int32_t p_last = p_first + (re - rb - 1);
        const int32_t lo_min = window_lo(p_first, p.window), lo_max = window_lo(p_last, p.window);
        int32_t lo_r[2], hi_r[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int r = r0 + 8 * k;
            const bool in = r >= rb && r < re;
            hi_r[k] = in ? p_first + (r - rb) : -1;
            lo_r[k] = in ? window_lo(hi_r[k], p.window) : 0;
        }
        const bool all_rows = rb == 0 && re == BM;
        const int kt0 = lo_min / BN, kt1 = p_last / BN;
        auto key_offset = [&](int32_t j) -> int64_t {
            if (j < lo_min || j > p_last) return -1;
            return ops::kv_pool_index(table[j / bs], j % bs, kvh, bs, kv_row, D);
        };

        __syncthreads();  // the previous run no longer reads rowoff or the tiles
        if (tid < BN) {
            rowoff[tid] = key_offset(kt0 * BN + tid);
            rowoff[BN + tid] = kt0 + 1 <= kt1 ? key_offset((kt0 + 1) * BN + tid) : -1;
        }
        __syncthreads();
        issue_kv<D>(ks, k_pool, rowoff);

        for (int kt = kt0; kt <= kt1; ++kt) {
            const int slot = (kt - kt0) & 1;
            const int32_t kb = kt * BN;
            land_copies();  // K tile landed; every warpgroup is done with ks, vs and ps
            issue_kv<D>(vs, v_pool, rowoff + slot * BN);
            const int64_t next_off = tid < BN && kt + 2 <= kt1 ? key_offset((kt + 2) * BN + tid) : -1;

            // S = Q·Kᵀ: this warpgroup's 64 rows × SK keys, one wgmma per k16 step.
            float sc[NS * 4];
#pragma unroll
            for (int i = 0; i < NS * 4; ++i) sc[i] = 0.0f;
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < D / 16; ++s) {
                const uint32_t blk = static_cast<uint32_t>(s / 4), in_row = 32u * (s % 4);
                const uint64_t da = desc_q + ((blk * BM * 128 + in_row) >> 4);
                const uint64_t db = desc_k + ((blk * BN * 128 + in_row) >> 4);
                if constexpr (SK == 64)
                    wgmma_m64n64k16_f16_ss_kb(sc, da, db);
                else
                    wgmma_m64n32k16_f16_ss_kb(sc, da, db);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands(sc);

            // Scale, mask, row maxima (sc[4i + c]: row r0 + 8·(c / 2), key key0 + 8i + 2·t4 + c % 2).
            const bool unmasked = all_rows && kb >= lo_max && kb + BN - 1 <= p_first;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < NS; ++i)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int k = c / 2;
                    const int32_t j = kb + key0 + i * 8 + t4 * 2 + (c & 1);
                    float sv = sc[4 * i + c] * scale_log2;
                    if (!unmasked && (j < lo_r[k] || j > hi_r[k])) sv = -INFINITY;
                    sc[4 * i + c] = sv;
                    mx[k] = fmaxf(mx[k], sv);
                }
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 1));
                mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 2));
            }
            if constexpr (W::kSplit > 1) {
                if (t4 == 0) {
                    red[wg * 64 + r0] = mx[0];
                    red[wg * 64 + r0 + 8] = mx[1];
                }
                __syncthreads();
#pragma unroll
                for (int k = 0; k < 2; ++k) mx[k] = fmaxf(red[r0 + 8 * k], red[64 + r0 + 8 * k]);
            }
            // Online softmax. O is rescaled only when a row of the warp has a new
            // maximum (corr = 1 otherwise, and x · 1 = x: the same bits); past the
            // first tiles of a causal row that is rare.
            float base[2], corr[2];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const float m_new = fmaxf(m[k], mx[k]);
                corr[k] = exp2f(m[k] - m_new);
                m[k] = m_new;
                base[k] = m_new;
                l[k] *= corr[k];
            }
            if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
                for (int i = 0; i < 32; ++i) {
                    o[4 * i] *= corr[0];
                    o[4 * i + 1] *= corr[0];
                    o[4 * i + 2] *= corr[1];
                    o[4 * i + 3] *= corr[1];
                }
            }
#pragma unroll
            for (int i = 0; i < NS; ++i)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float e = exp2f(sc[4 * i + c] - base[c / 2]);
                    sc[4 * i + c] = e;
                    l[c / 2] += e;
                }
            if constexpr (W::kSplit > 1) {  // publish this warpgroup's P columns
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    const int key = key0 + 8 * i + 2 * t4;
#pragma unroll
                    for (int k = 0; k < 2; ++k) {
                        const int r = r0 + 8 * k;
                        *reinterpret_cast<uint32_t*>(ps + swz(r, key / 8, 64) + (key % 8) * 2) =
                            pack_half2(sc[4 * i + 2 * k], sc[4 * i + 2 * k + 1]);
                    }
                }
                fence_async_smem();
            }

            land_copies();  // V tile landed; P published; every warpgroup is done with ks
            if (tid < BN && kt + 2 <= kt1) rowoff[slot * BN + tid] = next_off;
            if (kt < kt1) issue_kv<D>(ks, k_pool, rowoff + (slot ^ 1) * BN);

            // O += P·V over the tile's 64 keys, this warpgroup's 256 columns. At D = 256
            // the A fragments of all four k16 steps are packed before the fence, so
            // no register write separates the wgmmas.
            uint32_t pa[BN / 16][4];
            if constexpr (W::kSplit == 1) {
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
                    for (int j = 0; j < 4; ++j) pa[kk][j] = pack_half2(sc[8 * kk + 2 * j], sc[8 * kk + 2 * j + 1]);
            }
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const uint64_t db = desc_v + ((kk * 16 * 128) >> 4);
                if constexpr (W::kSplit > 1)
                    wgmma_m64n256k16_f16_ss_nb(o, desc_p + ((32 * kk) >> 4), db);
                else
                    wgmma_m64n256k16_f16_rs_nb(o, pa[kk], db);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands(o);
        }
    }

    // Row sums: over the quad, then (D = 512) over the two warpgroups.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        l[k] += __shfl_xor_sync(0xffffffffu, l[k], 1);
        l[k] += __shfl_xor_sync(0xffffffffu, l[k], 2);
    }
    if constexpr (W::kSplit > 1) {
        __syncthreads();  // red's last maxima are read
        if (t4 == 0) {
            red[wg * 64 + r0] = l[0];
            red[wg * 64 + r0 + 8] = l[1];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 2; ++k) l[k] = red[r0 + 8 * k] + red[64 + r0 + 8 * k];
    }
    // Rows of no run (l = 0) belong to the split kernel.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        if (l[k] <= 0.0f) continue;
        const int64_t t = t0 + r0 + 8 * k;
        float* dst = p.out + (t * p.n_heads + h) * D + col0 + t4 * 2;
        const float inv = 1.0f / l[k];
#pragma unroll
        for (int i = 0; i < 32; ++i)
            *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[4 * i + 2 * k] * inv, o[4 * i + 2 * k + 1] * inv);
    }
#else
    (void)p;
    (void)plan;
    (void)scale_log2;
    __trap();
#endif
}

template <int D>
void launch_d(const ops::AttentionParams& p, const int* plan, int64_t n_tiles, float scale_log2, cudaStream_t s) {
    using W = WgShape<D>;
    allow_smem<attention_wgmma_kernel<D>>(W::kSmem);
    const dim3 grid(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(n_tiles));
    launch(attention_wgmma_kernel<D>, grid, kThreads, W::kSmem, s, p, plan, scale_log2);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool launch_tile_wgmma(const ops::AttentionParams& p, const int* plan, int64_t n_tiles, float scale_log2,
                       cudaStream_t s) {
    if (!use_wgmma() || p.kv_type != ops::KvType::f16) return false;
    if (p.head_dim == 256) {
        launch_d<256>(p, plan, n_tiles, scale_log2, s);
        return true;
    }
    if (p.head_dim == 512) {
        launch_d<512>(p, plan, n_tiles, scale_log2, s);
        return true;
    }
    return false;
}

}  // namespace hf2q::cuda::attn
