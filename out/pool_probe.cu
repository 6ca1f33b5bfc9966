// Session 47 probe (not part of the build): does the KV pool's layout bind the 8-bit decode
// attention? The keys-by-warp kernel reads, per (sequence, KV head), 16-key tiles whose rows are
// D bytes (i8) at a stride of n_kv_heads·D (the pool's [position][KV head][D] layout), so each
// row is a 256-byte run; the f16 cache's rows are 512-byte runs and its kernel reached 83-91 % of
// the copy rate where the i8 one reaches 65-71 %. This kernel has the warp kernel's memory
// pipeline only (4 warps a block, 3 stages of K and V a warp, cp.async, 104 KB a block so 2
// blocks an SM, a word a lane read back from each stage) over the bench's shapes (64 sequences ×
// 1,024 keys, 8 KV heads), in the pool layout and in a head-major one ([block of 16][KV head]
// [position][D]: 16 rows of a head contiguous), for 1- and 2-byte values, one or two splits.
//   nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pool_probe out/pool_probe.cu && /tmp/pool_probe
#include "probe_common.cuh"

#include <cstdio>
#include <cstdint>

constexpr int kSeqs = 64, kKeys = 1024, kHeads = 8, kBs = 16, kTile = 16, kStages = 3;

// RB: bytes of one head's row; head_major: the pool's layout (0) or [block][head][pos][RB] (1).
template <int RB, bool kHeadMajor>
__global__ void __launch_bounds__(128) probe(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v,
                                             int n_split, float* out) {
    extern __shared__ __align__(16) uint8_t sm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The warp kernel's grid order: x = token (fastest), y = head group, z = split.
    const int seq = blockIdx.x % kSeqs, head = blockIdx.x / kSeqs % kHeads, split = blockIdx.x / (kSeqs * kHeads);
    const int tiles = kKeys / kTile / n_split, t0 = split * tiles;
    constexpr int kLd = RB + 16, kStageBytes = 2 * kTile * kLd;
    uint8_t* const stage = sm + warp * kStages * kStageBytes;
    auto offset = [&](int key) -> int64_t {  // byte offset of (seq, key, head) in a pool
        const int64_t pos = int64_t{seq} * kKeys + key, blk = pos / kBs, r = pos % kBs;
        if constexpr (kHeadMajor) return ((blk * kHeads + head) * kBs + r) * RB;
        return (pos * kHeads + head) * RB;
    };
    auto issue = [&](int s, int j) {
        uint8_t* ks = stage + s * kStageBytes;
        uint8_t* vs = ks + kTile * kLd;
        constexpr int kPieces = kTile * RB / 16;
#pragma unroll
        for (int i = 0; i < kPieces / 32; ++i) {
            const int u = lane + 32 * i, r = u / (RB / 16), col = (u % (RB / 16)) * 16;
            const int64_t o = offset((t0 + j) * kTile + r) + col;
            cp16(ks + r * kLd + col, k + o);
            cp16(vs + r * kLd + col, v + o);
        }
    };
    float acc = 0.0f;
    const int mine = (tiles - warp + 3) / 4;  // tiles warp, warp + 4, ...
    for (int i = 0; i + 1 < kStages; ++i) {
        if (i < mine) issue(i, warp + 4 * i);
        commit();
    }
    for (int i = 0, s = 0; i < mine; ++i, s = s + 1 == kStages ? 0 : s + 1) {
        if (i + kStages - 1 < mine) issue(s == 0 ? kStages - 1 : s - 1, warp + 4 * (i + kStages - 1));
        commit();
        wait_group<kStages - 1>();
        __syncwarp();
        const uint8_t* ks = stage + s * kStageBytes;
        acc += static_cast<float>(ks[lane * 8] + ks[kTile * kLd + lane * 8 + 4]);
        __syncwarp();
    }
    wait_group<0>();
    if (acc == 12345.0f) out[blockIdx.x] = acc;  // never true for these pools (zeros)
}

// copy: the device's cudaMemcpy rate (read + write, TB/s), the ceiling the rates are shown against.
template <int RB, bool kHeadMajor>
void run(const uint8_t* k, const uint8_t* v, float* out, int n_split, double copy) {
    // Four warps' stages (session 47 passed a fixed 104 KB, too little for RB 512: that case faulted).
    constexpr size_t smem = size_t{4} * kStages * 2 * kTile * (RB + 16);
    cudaFuncSetAttribute(probe<RB, kHeadMajor>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    const int blocks = kSeqs * kHeads * n_split;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 5; ++i) probe<RB, kHeadMajor><<<blocks, 128, smem>>>(k, v, n_split, out);
    cudaEventRecord(a);
    constexpr int kReps = 50;
    for (int i = 0; i < kReps; ++i) probe<RB, kHeadMajor><<<blocks, 128, smem>>>(k, v, n_split, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    const double us = 1000.0 * ms / kReps, bytes = 2.0 * kSeqs * kKeys * kHeads * RB;
    std::printf("RB %3d %-11s splits %d: %7.1f us, %6.0f MB, %5.2f TB/s (%2.0f %% of copy)\n", RB,
                kHeadMajor ? "head-major" : "pool", n_split, us, bytes / 1e6, bytes / us / 1e6,
                100.0 * bytes / us / 1e6 / copy);
}

int main() {
    const size_t bytes = size_t{kSeqs} * kKeys * kHeads * 512;
    uint8_t *k, *v;
    float* out;
    if (cudaMalloc(&k, bytes) || cudaMalloc(&v, bytes) || cudaMalloc(&out, 1 << 20)) return 1;
    cudaMemset(k, 0, bytes);
    cudaMemset(v, 0, bytes);
    const double copy = copy_rate(k, bytes);  // the ceiling
    std::printf("cudaMemcpy D2D %zu MB: %.2f TB/s (read + write)\n", bytes >> 20, copy);
    for (int s : {1, 2}) {
        run<256, false>(k, v, out, s, copy);
        run<256, true>(k, v, out, s, copy);
        run<512, false>(k, v, out, s, copy);
        run<512, true>(k, v, out, s, copy);
    }
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("%s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
