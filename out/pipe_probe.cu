// Session 48 probe (not part of the build): how deep must the keys-by-warp kernel's pipeline be,
// and how much does a tile's arithmetic cost it? out/pool_probe.cu (the kernel's memory
// pipeline alone: 4 warps a block, 3 stages of K and V a warp, 104 KB a block, 2 blocks an SM)
// read the i8 bench shapes at 95 % of the copy rate on an H100, where the kernel reaches about
// 84 %, and the kernel with its score and P·V arithmetic knocked out was still 7 % slower than
// the probe (out/s48b.sh). On the H200 the kernel reaches about 65 % of copy: this probe says
// whether bytes in flight (warps × stages) or the time between a warp's copies binds there.
//
// Same reads as the kernel (64 sequences × 1,024 keys × 8 KV heads, 256-byte rows at 2 KiB
// strides, grid x = token, y = head, one split), W warps a block, S stages of K and V a warp,
// and `spin` SM cycles of busy waiting after each tile arrives (a stand-in for its arithmetic:
// the kernel's tile costs roughly 1,000-4,000 cycles). Each line gives blocks an SM (occupancy),
// KB in flight an SM while every warp computes (W · blocks · (S − 1) tiles of 8 KiB; the split
// ring, R below, keeps up to half a tile a warp more), the time and the rate against cudaMemcpy's.
//   nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pipe_probe out/pipe_probe.cu && /tmp/pipe_probe
#include "probe_common.cuh"

#include <cstdint>
#include <cstdio>

constexpr int kSeqs = 64, kKeys = 1024, kHeads = 8, kTile = 16, kRb = 256, kLd = kRb + 16;
constexpr int kStageBytes = 2 * kTile * kLd;  // K and V of one 16-key tile, rows padded

// R (split ring): K and V in separate groups, K of tile i + S asked for as soon as tile i's
// scores are done (half the spin) and V of tile i + S − 1 after its P·V, so a warp keeps 2S − 1
// of its 2S half-stages in flight during the second half instead of 2S − 2 throughout.
template <int W, int S, bool R>
__global__ void __launch_bounds__(32 * W) probe(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v,
                                                long long spin, float* out) {
    extern __shared__ __align__(16) uint8_t sm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int seq = blockIdx.x % kSeqs, head = blockIdx.x / kSeqs;
    constexpr int kTiles = kKeys / kTile;
    uint8_t* const stage = sm + warp * S * kStageBytes;
    // Copies K (half 0) and/or V (half 1) of tile j into stage s.
    auto issue_halves = [&](int s, int j, bool want_k, bool want_v) {
        uint8_t* ks = stage + s * kStageBytes;
        uint8_t* vs = ks + kTile * kLd;
#pragma unroll
        for (int i = 0; i < kTile * kRb / 16 / 32; ++i) {
            const int u = lane + 32 * i, r = u / (kRb / 16), col = (u % (kRb / 16)) * 16;
            const int64_t o = ((int64_t{seq} * kKeys + j * kTile + r) * kHeads + head) * kRb + col;
            if (want_k) cp16(ks + r * kLd + col, k + o);
            if (want_v) cp16(vs + r * kLd + col, v + o);
        }
    };
    auto issue = [&](int s, int j) { issue_halves(s, j, true, true); };
    auto busy = [&](long long cycles) {
        const long long t0 = clock64();
        while (clock64() - t0 < cycles) {
        }
    };
    float acc = 0.0f;
    const int mine = (kTiles - warp + W - 1) / W;  // tiles warp, warp + W, ...
    if constexpr (R) {  // groups K0 V0 K1 V1 ... K(S-2) V(S-2) K(S-1), then V and K by turns
        for (int i = 0; i + 1 < S; ++i) {
            if (i < mine) issue_halves(i, warp + W * i, true, false);
            commit();
            if (i < mine) issue_halves(i, warp + W * i, false, true);
            commit();
        }
        if (S - 1 < mine) issue_halves(S - 1, warp + W * (S - 1), true, false);
        commit();
        for (int i = 0; i < mine; ++i) {
            const int s = i % S;
            if (i + S - 1 < mine) issue_halves((i + S - 1) % S, warp + W * (i + S - 1), false, true);
            commit();
            wait_group<2 * S - 1>();  // K of tile i
            __syncwarp();
            acc += static_cast<float>(stage[s * kStageBytes + lane * 8]);
            busy(spin / 2);
            __syncwarp();
            if (i + S < mine) issue_halves(s, warp + W * (i + S), true, false);
            commit();
            wait_group<2 * S - 1>();  // V of tile i
            __syncwarp();
            acc += static_cast<float>(stage[s * kStageBytes + kTile * kLd + lane * 8 + 4]);
            busy(spin - spin / 2);
            __syncwarp();
        }
    } else {  // every stage's K and V in one group
        for (int i = 0; i + 1 < S; ++i) {
            if (i < mine) issue(i, warp + W * i);
            commit();
        }
        for (int i = 0, s = 0; i < mine; ++i, s = s + 1 == S ? 0 : s + 1) {
            if (i + S - 1 < mine) issue(s == 0 ? S - 1 : s - 1, warp + W * (i + S - 1));
            commit();
            wait_group<S - 1>();
            __syncwarp();
            const uint8_t* ks = stage + s * kStageBytes;
            acc += static_cast<float>(ks[lane * 8] + ks[kTile * kLd + lane * 8 + 4]);
            busy(spin);
            __syncwarp();
        }
    }
    wait_group<0>();
    if (acc == 12345.0f) out[blockIdx.x] = acc;  // never true for these pools (zeros)
}

template <int W, int S, bool R = false>
void run(const uint8_t* k, const uint8_t* v, float* out, long long spin, double copy) {
    constexpr size_t smem = size_t{W} * S * kStageBytes;
    if (smem > 227 * 1024) return;
    cudaFuncSetAttribute(probe<W, S, R>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, probe<W, S, R>, 32 * W, smem);
    const int blocks = kSeqs * kHeads;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; ++i) probe<W, S, R><<<blocks, 32 * W, smem>>>(k, v, spin, out);
    cudaEventRecord(a);
    constexpr int kReps = 20;
    for (int i = 0; i < kReps; ++i) probe<W, S, R><<<blocks, 32 * W, smem>>>(k, v, spin, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    const double us = 1000.0 * ms / kReps, bytes = 2.0 * kSeqs * kKeys * kHeads * kRb;
    const double flight_kb = double(W) * per_sm * (S - 1) * 2 * kTile * kRb / 1024.0;
    std::printf("W %d S %d%s spin %5lld: %d blocks/SM, %4.0f KB in flight/SM: %7.1f us, %5.2f TB/s", W, S,
                R ? " split ring" : "           ", spin, per_sm, flight_kb, us, bytes / us / 1e6);
    std::printf(" (%3.0f %% of copy)\n", 100.0 * bytes / us / 1e6 / copy);
}

int main() {
    const size_t bytes = size_t{kSeqs} * kKeys * kHeads * kRb;
    uint8_t *k, *v;
    float* out;
    if (cudaMalloc(&k, bytes) || cudaMalloc(&v, bytes) || cudaMalloc(&out, 1 << 20)) return 1;
    cudaMemset(k, 0, bytes);
    cudaMemset(v, 0, bytes);
    const double copy = copy_rate(k, bytes);
    std::printf("cudaMemcpy D2D %zu MB: %.2f TB/s (read + write)\n", bytes >> 20, copy);
    for (long long spin : {0LL, 1000LL, 2000LL, 4000LL}) {
        run<4, 2>(k, v, out, spin, copy);
        run<4, 3>(k, v, out, spin, copy);  // the kernel's shape
        run<2, 4>(k, v, out, spin, copy);
        run<2, 6>(k, v, out, spin, copy);
        run<4, 6>(k, v, out, spin, copy);
        run<8, 3>(k, v, out, spin, copy);
        run<4, 3, true>(k, v, out, spin, copy);
        run<2, 4, true>(k, v, out, spin, copy);
        run<2, 6, true>(k, v, out, spin, copy);
    }
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("%s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
