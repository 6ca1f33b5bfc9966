// Mixture-of-experts routing: per token softmax over expert logits (f32), top-k
// largest (descending, lower index first on ties), renormalised to sum 1, then
// multiplied by a per-expert scale when given.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/matmul.h"
#include "ops/prepared.h"
#include "ops/types.h"

namespace hf2q::ops {

// With router_x set (honoured by Backend::moe_route_group only; moe_route rejects
// it), the op first computes the router product
//   logits = router_x · router_wᵀ   (the matmul op's result, to its tolerance)
// into `logits`, which is then an output the caller must hand writable memory for,
// and routes those logits. Folding the router into the routing op lets a device
// backend run the product, the routing and the grouping as one kernel in decode.
struct MoeRouteParams {
    const float* logits = nullptr;        // [n_tokens][n_experts]; with router_x, written
    const float* expert_scale = nullptr;  // [n_experts] or nullptr
    int32_t* ids = nullptr;               // [n_tokens][k] selected experts
    float* weights = nullptr;             // [n_tokens][k] routing weights
    int64_t n_tokens = 0;
    int64_t n_experts = 0;
    int64_t k = 0;
    const float* router_x = nullptr;      // optional: [n_tokens][router_x_stride], first n_in used
    int64_t router_x_stride = 0;          // 0 means router_w.n_in
    WeightView router_w{};                // with router_x: n_experts × n_in (any matmul type)
    const void* router_x_bf16 = nullptr;  // optional: router_x's rows in BF16 (ops/prepared.h; stride n_in)
};

// The router product of r (r.router_x set) as a matmul op.
inline MatmulParams router_product(const MoeRouteParams& r) {
    MatmulParams m;
    m.w = r.router_w;
    m.x = r.router_x;
    m.x_stride = r.router_x_stride;
    // logits is const as the routing's input; with router_x the caller hands
    // writable memory (the contract above).
    m.y = const_cast<float*>(r.logits);
    m.n_tokens = r.n_tokens;
    m.x_bf16 = r.router_x_bf16;
    return m;
}

// The routing that follows the router product: r without its router input.
inline MoeRouteParams routing_of(const MoeRouteParams& r) {
    MoeRouteParams q = r;
    q.router_x = nullptr;
    q.router_x_stride = 0;
    q.router_w = WeightView{};
    q.router_x_bf16 = nullptr;
    return q;
}

}  // namespace hf2q::ops

namespace hf2q::ops {

// Groups the (token, slot) pairs of a routing by expert (a stable counting sort:
// inside an expert, pairs keep their order t·k + j).
//   offsets[e] .. offsets[e+1]: the grouped rows of expert e (offsets[E] = n_tokens·k)
//   rows[r]:     token of grouped row r
//   slot_of[p]:  grouped row of pair p = t·k + j
struct MoeGroupParams {
    const int32_t* ids = nullptr;  // [n_tokens][k], each in [0, n_experts)
    int64_t n_tokens = 0;
    int64_t k = 0;
    int64_t n_experts = 0;
    int32_t* offsets = nullptr;    // [n_experts + 1]
    int32_t* rows = nullptr;       // [n_tokens·k]
    int32_t* slot_of = nullptr;    // [n_tokens·k]
};

struct MoeCombineParams;

// Grouped linear layer over the experts of a 3-D weight: for every expert e and
// grouped row r in [offsets[e], offsets[e+1]):
//   y[r] = x[src(r)] · W_eᵀ,  src(r) = x_rows ? x_rows[r] : r,
// W_e the n_out × n_in matrix at w.data + e · expert_bytes.
struct MoeMatmulParams {
    WeightView w;                  // expert 0's view
    uint64_t expert_bytes = 0;     // bytes between consecutive experts
    int64_t n_experts = 0;
    const int32_t* offsets = nullptr;       // [n_experts + 1], backend memory
    const int32_t* host_offsets = nullptr;  // the same on the host, or nullptr (a device
                                            // backend then keeps the work on the device)
    const int32_t* x_rows = nullptr;        // optional gather of x rows
    int64_t x_n_rows = 0;                   // with x_rows: the rows of x they index (every
                                            // x_rows[r] < x_n_rows), or 0 when not known
    const float* x = nullptr;
    int64_t x_stride = 0;          // 0 means n_in
    float* y = nullptr;            // [n_rows][y_stride]
    int64_t y_stride = 0;          // 0 means n_out
    int64_t n_rows = 0;            // offsets[n_experts]
    const void* x_prep = nullptr;  // optional: x prepared (ops/prepared.h): its n_rows rows,
                                   // or with x_rows its x_n_rows rows (x_n_rows > 0
                                   // required), which the gather then indexes

    // GEGLU epilogue (Gemma's gate_up experts). With geglu, W_e's n_out = 2F rows are
    // the gate rows [0, F), then the up rows [F, 2F), and y gets
    //   y[r][j] = gelu_tanh(P[r][j]) · P[r][F + j],  j < F  (y_stride 0 means F),
    // P the product above: the result of this op without geglu into geglu_scratch
    // ([n_rows][2F], required), then the GEGLU op (ops/activation.h) over it. A backend
    // may fuse the two (the CUDA tile kernels and grouped GEMV do: P never reaches
    // memory) or run
    // exactly those two ops. y_prep (optional, in batches the prepared contract
    // allows) also receives y in the prepared form, as GegluParams::out_prep does.
    bool geglu = false;
    float* geglu_scratch = nullptr;
    void* y_prep = nullptr;

    // Combine epilogue (optional, not with geglu): the weighted combine of one token's
    // routed rows of this product's output (combine->y == y, combine->n_tokens == 1),
    // run after it: the moe_combine op over y, which a backend may fold into the
    // product (the CUDA backend does in a decode step's down product: the product's
    // warps hold every routed row of an output column). y is written either way.
    const MoeCombineParams* combine = nullptr;
};

// The two ops a geglu product means (MoeMatmulParams::geglu), for backends that
// run them unfused: the plain product into the scratch, then the GEGLU op over it
// (with y_prep as its prepared output).
inline MoeMatmulParams geglu_product(const MoeMatmulParams& p) {
    MoeMatmulParams q = p;
    q.geglu = false;
    q.y = p.geglu_scratch;
    q.y_stride = 0;
    q.y_prep = nullptr;
    return q;
}
inline GegluParams geglu_of_product(const MoeMatmulParams& p) {
    const int64_t F = p.w.n_out / 2;
    GegluParams g = gate_up_geglu(p.geglu_scratch, p.y, p.n_rows, F);
    g.out_stride = p.y_stride ? p.y_stride : F;
    g.out_prep = p.y_prep;
    return g;
}

// Weighted combine of the experts' outputs, slots in increasing j:
//   out[t][i] = Σ_j weights[t·k + j] · y[slot_of[t·k + j]][i]
struct MoeCombineParams {
    const float* y = nullptr;
    int64_t y_stride = 0;
    const int32_t* slot_of = nullptr;  // [n_tokens·k]
    const float* weights = nullptr;    // [n_tokens·k]
    float* out = nullptr;              // [n_tokens][out_stride]
    int64_t out_stride = 0;
    int64_t n_tokens = 0;
    int64_t k = 0;
    int64_t n = 0;
};

// The product a combine-epilogue product means (MoeMatmulParams::combine), for
// backends that run it unfused or where their fused kernel does not apply: p
// without its combine, which the caller then runs with moe_combine.
inline MoeMatmulParams combine_product(const MoeMatmulParams& p) {
    HF2Q_ASSERT(p.combine != nullptr && !p.geglu && p.combine->n_tokens == 1 && p.combine->y == p.y);
    MoeMatmulParams q = p;
    q.combine = nullptr;
    return q;
}

}  // namespace hf2q::ops
