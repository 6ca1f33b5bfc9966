// Scale/offset search routines shared by the k-quants, the legacy imatrix paths and Q6_K
// (ggml-quants.c make_qx_quants, make_q3_quants, make_qkx2_quants, make_qkx3_quants,
// make_qp_quants; spec §7). Every expression keeps the reference's operand order: the
// bytes of the quantized files depend on it.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant_impl.h"

namespace hf2q::quant::detail {
namespace {

float signed_absmax(const float* x, int n) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    return max;
}

float qx_weight(const float* qw, const float* x, int i, int rmse_type) {
    if (qw) return qw[i];
    if (rmse_type == 1) return x[i] * x[i];
    if (rmse_type == 2) return 1.0f;
    if (rmse_type == 3) return std::fabs(x[i]);
    return std::sqrt(std::fabs(x[i]));
}

int qx_code(float iscale, float x, int nmax) {
    return clamp_int(nearest_int(iscale * x), -nmax, nmax - 1);
}

}  // namespace

// Symmetric codes l in [-nmax, nmax-1], stored as l + nmax. rmse_type 0: plain rounding;
// > 0: weighted least squares over 19 candidate scales; < 0: one refinement step only.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type, const float* qw) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < kGroupMaxEps) {
        std::memset(L, 0, static_cast<size_t>(n));
        return 0.0f;
    }
    float iscale = static_cast<float>(-nmax) / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + qx_code(iscale, x[i], nmax));
        return 1.0f / iscale;
    }
    bool return_early = false;
    if (rmse_type < 0) {
        rmse_type = -rmse_type;
        return_early = true;
    }
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = qx_code(iscale, x[i], nmax);
        L[i] = static_cast<int8_t>(l + nmax);
        const float w = qx_weight(qw, x, i, rmse_type);
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    if (return_early) return suml2 > 0 ? 0.5f * (scale + 1.0f / iscale) : 1.0f / iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        sumlx = 0.0f;
        suml2 = 0.0f;
        for (int i = 0; i < n; ++i) {
            const float l = static_cast<float>(qx_code(iscale, x[i], nmax));
            const float w = qx_weight(qw, x, i, rmse_type);
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = static_cast<int8_t>(nmax + qx_code(iscale, x[i], nmax));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q3_K's per-sub-block search: x²-weighted, coordinate-descent refinement of single codes.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L, bool do_rmse) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < kGroupMaxEps) {
        std::memset(L, 0, static_cast<size_t>(n));
        return 0.0f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    if (!do_rmse) {
        for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(qx_code(iscale, x[i], nmax) + nmax);
        return 1.0f / iscale;
    }
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = qx_code(iscale, x[i], nmax);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const auto li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            if (slx > 0) {
                float sl2 = suml2 - w * li * li;
                const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    const auto nl = static_cast<float>(new_l);
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<int8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

namespace {

// Weighted error of codes l under (scale, min): Σ w·|s·l + m − x| or Σ w·(s·l + m − x)².
float qkx_error(int n, const float* x, const float* w, const uint8_t* l, float scale, float min,
                bool use_mad) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
        float diff = scale * static_cast<float>(l[i]) + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        err += w[i] * diff;
    }
    return err;
}

// Shared body of make_qkx2_quants / make_qkx3_quants: asymmetric codes 0..nmax with a
// weighted least-squares fit of (scale, min) over nstep+1 candidate inverse scales.
// qkx3 differs only in its degenerate-range test (max <= min instead of max == min).
float make_qkx_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                      uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad, bool qkx3) {
    float min = x[0];
    float max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (qkx3 ? max <= min : max == min) {
        std::memset(L, 0, static_cast<size_t>(n));
        *the_min = -min;
        return 0.0f;
    }
    const auto fmax = static_cast<float>(nmax);
    float iscale = fmax / (max - min);
    float scale = 1.0f / iscale;
    for (int i = 0; i < n; ++i)
        L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float best_error = qkx_error(n, x, w, L, scale, min, use_mad);
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + fmax) / (max - min);
        float sum_l = 0.0f;
        float sum_l2 = 0.0f;
        float sum_xl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<uint8_t>(l);
            const auto fl = static_cast<float>(l);
            sum_l += w[i] * fl;
            sum_l2 += w[i] * fl * fl;
            sum_xl += w[i] * fl * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            const float cur_error = qkx_error(n, x, w, Laux, this_scale, this_min, use_mad);
            if (cur_error < best_error) {
                std::memcpy(L, Laux, static_cast<size_t>(n));
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

}  // namespace

float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    return make_qkx_quants(n, nmax, x, w, L, the_min, Laux, rmin, rdelta, nstep, use_mad, false);
}

float make_qkx3_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    return make_qkx_quants(n, nmax, x, w, L, the_min, Laux, rmin, rdelta, nstep, use_mad, true);
}

// Quantizes non-negative values (sub-block scales or mins) to 0..nmax against one scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* w) {
    float max = 0.0f;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < kGroupMaxEps) {
        std::memset(L, 0, static_cast<size_t>(n));
        return 0.0f;
    }
    const auto fmax = static_cast<float>(nmax);
    float iscale = fmax / max;
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    const float scale = 1.0f / iscale;
    float best_mse = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * static_cast<float>(L[i]);
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * static_cast<float>(is) + fmax) / max;
        const float scale_is = 1.0f / iscale_is;
        float mse = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * static_cast<float>(l);
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = static_cast<uint8_t>(l);
        const auto fl = static_cast<float>(l);
        sumlx += w[i] * x[i] * fl;
        suml2 += w[i] * fl * fl;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const auto li = static_cast<float>(L[i]);
            float slx = sumlx - w[i] * x[i] * li;
            float sl2 = suml2 - w[i] * li * li;
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    const auto nl = static_cast<float>(new_l);
                    slx += w[i] * x[i] * nl;
                    sl2 += w[i] * nl * nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<uint8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

}  // namespace hf2q::quant::detail
