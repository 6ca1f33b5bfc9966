// out/s59_emu.cpp (session 59): a host emulation of gemm_tile.cu's repack and fragment decode against reg_decoded_row's values.
// g++ -O2 -std=c++20 -o /tmp/emu out/s59_emu.cpp && /tmp/emu   (expect "checked 18944 values, 0 differ")
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
static float f16(uint16_t h) {
    const uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp(static_cast<float>(m | 1024), static_cast<int>(e) - 25);
    return s ? -v : v;
}
static float bf16_round(float x) {
    uint32_t u; std::memcpy(&u, &x, 4); u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u; std::memcpy(&x, &u, 4); return x;
}
static uint16_t bf16_bits(float x) { x = bf16_round(x); uint32_t u; std::memcpy(&u, &x, 4); return u >> 16; }
static float bf16_val(uint16_t b) { uint32_t u = static_cast<uint32_t>(b) << 16; float x; std::memcpy(&x, &u, 4); return x; }
int main() {
    const int N = 37, K = 512, units = K / 32, rb = K / 256 * 144;
    std::mt19937 rng(5);
    std::vector<uint8_t> w(static_cast<size_t>(N) * rb);
    for (auto& b : w) b = rng() & 255;
    for (int r = 0; r < N; ++r)
        for (int b = 0; b < K / 256; ++b) {  // finite d, dmin: exponents 5..20
            uint8_t* blk = &w[static_cast<size_t>(r) * rb + b * 144];
            for (int k = 0; k < 2; ++k) { uint16_t h = (rng() & 0x83FF) | ((5 + rng() % 15) << 10); blk[2*k] = h & 255; blk[2*k+1] = h >> 8; }
        }
    // reference values (reg_decoded_row)
    std::vector<float> ref(static_cast<size_t>(N) * K);
    for (int r = 0; r < N; ++r)
        for (int b = 0; b < K / 256; ++b) {
            const uint8_t* blk = &w[static_cast<size_t>(r) * rb + b * 144];
            const uint8_t* sc = blk + 4;
            for (int j = 0; j < 8; ++j) {
                const int s = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
                const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
                const float d1 = bf16_round(f16(blk[0] | blk[1] << 8) * s), m1 = bf16_round(f16(blk[2] | blk[3] << 8) * m);
                for (int i = 0; i < 32; ++i) {
                    const int q = (blk[16 + 32 * (j / 2) + i] >> (4 * (j % 2))) & 15;
                    ref[static_cast<size_t>(r) * K + b * 256 + 32 * j + i] = bf16_round(static_cast<float>(static_cast<double>(q) * d1 - m1));
                }
            }
        }
    // repack (the kernel's loop)
    const int groups = (N + 255) / 256 * 16;
    std::vector<uint8_t> dst(static_cast<size_t>(groups) * units * 320);
    for (int64_t i = 0; i < static_cast<int64_t>(groups) * units; ++i) {
        const int64_t grp = i / units, j = i % units;
        uint8_t* out = &dst[static_cast<size_t>(i) * 320];
        const int sb = static_cast<int>(j % 8);
        uint16_t sc_bits[16], mn_bits[16];
        const uint8_t* qs[16];
        for (int rr = 0; rr < 16; ++rr) {
            const int64_t row = grp * 16 + rr;
            qs[rr] = nullptr; sc_bits[rr] = mn_bits[rr] = 0;
            if (row >= N) continue;
            const uint8_t* blk = &w[static_cast<size_t>(row) * rb + (j / 8) * 144];
            const uint8_t* sc = blk + 4;
            const int s = sb < 4 ? sc[sb] & 63 : (sc[sb + 4] & 15) | ((sc[sb - 4] >> 6) << 4);
            const int m = sb < 4 ? sc[sb + 4] & 63 : (sc[sb + 4] >> 4) | ((sc[sb] >> 6) << 4);
            const float d = f16(blk[0] | (blk[1] << 8)), dmin = f16(blk[2] | (blk[3] << 8));
            sc_bits[rr] = bf16_bits(d * static_cast<float>(s));
            mn_bits[rr] = bf16_bits(-(dmin * static_cast<float>(m)));
            qs[rr] = blk + 16 + 32 * (sb / 2);
        }
        for (int g = 0; g < 8; ++g) {
            uint16_t o[4] = {sc_bits[g], mn_bits[g], sc_bits[g + 8], mn_bits[g + 8]};
            std::memcpy(out + 256 + 8 * g, o, 8);
        }
        for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, t = lane & 3;
            uint32_t words[2] = {0, 0};
            for (int s = 0; s < 2; ++s)
                for (int n = 0; n < 8; ++n) {
                    const int p = n & 3, rr = g + 8 * (p & 1), k = 16 * s + 2 * t + 8 * (p >> 1) + (n >> 2);
                    const uint32_t q = qs[rr] ? (qs[rr][k] >> (4 * (sb & 1))) & 15 : 0;
                    words[s] |= q << (n < 4 ? 4 * n : 16 + 4 * (n - 4));
                }
            std::memcpy(out + 8 * lane, words, 8);
        }
    }
    // decode as the kernel does, map by the PTX m16n8k16 A layout, compare
    long bad = 0, n = 0;
    for (int grp = 0; grp < groups; ++grp)
        for (int j = 0; j < units; ++j) {
            const uint8_t* unit = &dst[(static_cast<size_t>(grp) * units + j) * 320];
            for (int lane = 0; lane < 32; ++lane) {
                const int g = lane >> 2, t = lane & 3;
                uint32_t q[2]; std::memcpy(q, unit + 8 * lane, 8);
                uint16_t sp[4]; std::memcpy(sp, unit + 256 + 8 * g, 8);
                for (int s = 0; s < 2; ++s)
                    for (int p = 0; p < 4; ++p)
                        for (int e = 0; e < 2; ++e) {
                            const uint32_t v = ((q[s] >> (4 * p)) & 0x000F000Fu) | 0x43004300u;
                            const float qq = bf16_val(static_cast<uint16_t>(e ? v >> 16 : v & 0xFFFF)) - 128.0f;
                            const float sc = bf16_val(sp[(p & 1) ? 2 : 0]), mn = bf16_val(sp[(p & 1) ? 3 : 1]);
                            const float val = bf16_round(std::fma(qq, sc, mn));
                            // PTX: a0 (g, 2t+e), a1 (g+8, 2t+e), a2 (g, 2t+8+e), a3 (g+8, 2t+8+e)
                            const int row = grp * 16 + g + 8 * (p & 1), k = 32 * j + 16 * s + 2 * t + 8 * (p >> 1) + e;
                            if (row >= N) { if (val != 0.0f) ++bad; continue; }
                            ++n;
                            const float want = ref[static_cast<size_t>(row) * K + k];
                            if (val != want && !(std::isnan(val) && std::isnan(want))) { if (bad < 5) std::printf("row %d k %d got %g want %g\n", row, k, val, want); ++bad; }
                        }
            }
        }
    std::printf("checked %ld values, %ld differ\n", n, bad);
}
