// The op interface every backend implements. The model's forward pass is written
// against this interface only; it never touches threads, SIMD or device APIs.
// All pointers are in the backend's memory (host memory for the CPU backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gather.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/sampling.h"

namespace hf2q::ops {

// A recorded sequence of ops that replays with one launch (CUDA graphs). It reads
// and writes the same buffers as when it was captured; inputs change by writing
// new contents into those buffers before launch().
class Graph {
public:
    virtual ~Graph() = default;
    virtual void launch() = 0;
};

// Throws unless 1 ≤ n ≤ kMax and every weight takes the same input width.
inline void check_matmul_multi(const MultiMatmulParams& p) {
    if (p.n < 1 || p.n > MultiMatmulParams::kMax)
        fail("matmul_multi: ", p.n, " weights (1 to ", MultiMatmulParams::kMax, " supported)");
    for (int i = 1; i < p.n; ++i)
        if (p.w[i].n_in != p.w[0].n_in)
            fail("matmul_multi: weight ", i, " takes ", p.w[i].n_in, " inputs, weight 0 takes ", p.w[0].n_in);
}

// Throws unless g groups r's result and, with a router input, the router weight
// maps n_in values to one logit per expert.
inline void check_moe_route_group(const MoeRouteParams& r, const MoeGroupParams& g) {
    HF2Q_ASSERT(g.ids == r.ids && g.n_tokens == r.n_tokens && g.k == r.k && g.n_experts == r.n_experts);
    if (r.router_x == nullptr) return;
    HF2Q_ASSERT(r.n_tokens == 0 || r.logits != nullptr);
    const WeightView& w = r.router_w;
    if (w.empty()) fail("moe_route_group: a router input without a router weight");
    if (w.n_out != r.n_experts || w.n_in <= 0)
        fail("moe_route_group: the router weight has ", w.n_out, " rows of ", w.n_in,
             " values, expected one row per expert (", r.n_experts, ") of at least one value");
    if (r.router_x_stride != 0 && r.router_x_stride < w.n_in)
        fail("moe_route_group: router input stride ", r.router_x_stride, " < n_in ", w.n_in);
}

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;

    // Memory. Buffers live in the backend's memory space and are freed with the
    // backend. The defaults are host memory (the CPU backend); device backends
    // override all of them.
    virtual bool host_memory() const { return true; }  // weights usable in place (mmap)
    virtual void* alloc(size_t bytes) {
        // 64-byte aligned, zeroed.
        host_buffers_.emplace_back(new (std::align_val_t(64)) uint8_t[bytes > 0 ? bytes : 1]());
        return host_buffers_.back().get();
    }
    virtual void upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
    // Copies `rows` rows of `width` bytes (row i from src + i·pitch to dst + i·pitch)
    // in order with the work queued before and after it, without waiting for it. src
    // must come from alloc_host and stay unchanged until wait_uploads() returns: a
    // device backend reads it when the copy runs. upload() waits for its copy, as its
    // source may be pageable; a decode step's inputs in one block of page-locked memory
    // go up in one or two of these instead (runtime/context_impl.cpp).
    virtual void upload_async(void* dst, const void* src, size_t width, size_t rows, size_t pitch) {
        for (size_t i = 0; i < rows; ++i)
            std::memcpy(static_cast<uint8_t*>(dst) + i * pitch, static_cast<const uint8_t*>(src) + i * pitch, width);
    }
    // Returns once every upload_async issued before it has read its source.
    virtual void wait_uploads() {}
    virtual void download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
    // A ticket for the work queued so far: wait_fence(ticket) returns once it is done,
    // and with it every write it made to host memory (ArgmaxRowsParams::host_out), while
    // work queued later may still run: a greedy step's ids are read while the next
    // step, already queued, runs. 0 where the work is done on return, as here.
    virtual uint64_t fence() { return 0; }
    virtual void wait_fence(uint64_t ticket) { (void)ticket; }
    virtual void fill_zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }
    virtual void synchronize() {}
    // Host memory the backend copies to and from fastest (page-locked for a GPU),
    // freed with free_host. The default is plain aligned host memory.
    virtual void* alloc_host(size_t bytes) { return ::operator new(bytes > 0 ? bytes : 1, std::align_val_t(64)); }
    virtual void free_host(void* p) { ::operator delete(p, std::align_val_t(64)); }

    // A copy of weight w (already in this backend's memory) in a layout of the
    // backend's own that its one-token matmul reads faster, for
    // WeightView::decode_layout; null where the backend has none for w's type and
    // shape. The copy costs about w's bytes again and is freed with the backend.
    // Default: none.
    virtual const void* decode_layout(const WeightView& w) {
        (void)w;
        return nullptr;
    }

    // A copy of the n_expert experts of a 3-D weight (first: expert 0's view, already
    // in this backend's memory; expert_bytes apart) in a layout of the backend's own
    // that its expert products of batched decode read faster, for
    // WeightView::expert_layout; null where the backend has none for that type and
    // shape or the copy would not leave room. Freed with the backend. Default: none.
    virtual const void* expert_layout(const WeightView& first, uint64_t expert_bytes, int64_t n_expert) {
        (void)first;
        (void)expert_bytes;
        (void)n_expert;
        return nullptr;
    }

    // A copy of weight w (already in this backend's memory) in the backend's tile form,
    // for WeightView::tile_layout; null where the backend has none for w's type and
    // shape or the copy would not leave room. Freed with the backend. Default: none.
    virtual const void* tile_layout(const WeightView& w) {
        (void)w;
        return nullptr;
    }
    // The bytes tile_layout(w) would take (0 where the backend has no tile form for w's
    // type and shape), so that a loader copies a group multiplied in one launch only
    // where every member has one. Default: none.
    virtual uint64_t tile_layout_bytes(const WeightView& w) const {
        (void)w;
        return 0;
    }

    // Weight w (already in this backend's memory) expanded to BF16 rows once, for
    // WeightView::batch_layout: the backend's matmuls of batches above its GEMV range
    // then skip the per-call expansion. Costs 2 bytes per value (about 3.5 times a
    // Q4_K matrix) and is freed with the backend; null where the backend has no use
    // for it. Default: none.
    virtual const void* batch_layout(const WeightView& w) {
        (void)w;
        return nullptr;
    }
    // The bytes batch_layout(w) would take (0 where it makes none), for sizing all the
    // copies before making any (ModelLoadOptions::batch_copy).
    virtual uint64_t batch_layout_bytes(const WeightView& w) const {
        (void)w;
        return 0;
    }
    // Sets the batch_layout of every weight in ws (non-empty, one n_in), where the
    // backend makes them: one block of memory with the copies back to back in ws's
    // order where it can, so a matmul_multi whose outputs' columns are back to back
    // too (one row stride) may multiply them as one matrix. Default: one copy each.
    virtual void batch_layouts(std::span<WeightView* const> ws) {
        for (WeightView* w : ws) w->batch_layout = batch_layout(*w);
    }

    // Device memory not yet allocated, in bytes; 0 for host-memory backends.
    virtual size_t free_memory() const { return 0; }
    // Bytes alloc() has handed out so far (device backends; 0 for host-memory ones).
    virtual uint64_t allocated_bytes() const { return 0; }

    // Records the ops `body` issues into a graph instead of running them, or returns
    // nullptr (and runs nothing) where the backend has no graphs. `body` must not
    // synchronise (no download, upload or synchronize) nor allocate.
    virtual std::unique_ptr<Graph> capture(const std::function<void()>& body) {
        (void)body;
        return nullptr;
    }

    // Sizes matmul workspaces for inputs of up to `elems` activation values
    // (tokens × input width), so no op allocates later (graphs keep pointers).
    virtual void reserve_matmul_inputs(int64_t elems) { (void)elems; }

    // Two independent chains of ops (a MoE layer's dense MLP and its routed experts).
    // The ops issued between begin_side() and end_side() form the side chain; it may
    // run concurrently with the ops issued after end_side(), until join_side(), after
    // which every op sees the results of both chains. The two chains must not write
    // what the other reads or writes. One side chain at a time; inside a capture()
    // the side chain is joined before the body returns. download() and synchronize()
    // wait for both chains. Defaults: nothing (ops run in issue order, a valid
    // schedule of the two chains).
    virtual void begin_side() {}
    virtual void end_side() {}
    virtual void join_side() {}

    template <class T>
    T* alloc_array(size_t n) {
        return static_cast<T*>(alloc(n * sizeof(T)));
    }

    virtual void rms_norm(const RmsNormParams& p) = 0;
    // Prepared matmul inputs (ops/prepared.h): the most tokens per batch whose
    // matmul inputs may be prepared (0: the backend has no prepared form), and the
    // bytes of one for rows × n values (0: none for that width).
    virtual int64_t prepared_tokens() const { return 0; }
    // The most tokens per batch whose experts' down product may take its input prepared
    // by the GEGLU before it (ops/prepared.h), never fewer than prepared_tokens(): a
    // backend whose grouped expert GEMV reads the prepared form at larger batches than
    // its dense matmuls do.
    virtual int64_t prepared_expert_down_tokens() const { return prepared_tokens(); }
    virtual size_t prepared_bytes(int64_t rows, int64_t n) const {
        (void)rows;
        (void)n;
        return 0;
    }
    // Whether this backend's matmuls of a batch of n_tokens tokens may read their
    // inputs' BF16 rows (ops/prepared.h), so producers should write them.
    virtual bool reads_bf16_rows(int64_t n_tokens) const {
        (void)n_tokens;
        return false;
    }

    // Default: the sequence of rms_norm calls ops/norm.h describes (the CPU reference).
    virtual void residual_norms(const ResidualNormsParams& p) {
        check_residual_norms(p);
        if (p.rows == 0) return;
        RmsNormParams n;
        n.rows = p.rows;
        n.n = p.n;
        n.eps = p.eps;
        auto run = [&](const float* x, float* y, const float* w, const float* add_to, float scale) {
            n.x = x;
            n.y = y;
            n.w = w;
            n.add_to = add_to;
            n.out_scale = scale;
            rms_norm(n);
        };
        if (p.combine != nullptr) moe_combine(*p.combine);
        if (p.n_branch == 1) {
            run(p.b[0], p.x, p.w[0], p.x, p.scale);
        } else {
            run(p.b[0], p.b[0], p.w[0], nullptr, 1.0f);
            run(p.b[1], p.b[0], p.w[1], p.b[0], 1.0f);
            run(p.b[0], p.x, p.sum_w, p.x, p.scale);
        }
        for (int j = 0; j < p.n_out; ++j) run(p.x, p.y[j], p.out_w[j], nullptr, p.out_scale[j]);
    }
    virtual void rope(const RopeParams& p) = 0;
    // Default: the rms_norm (with RoPE) and kv_store sequence ops/rope.h describes.
    virtual void attention_inputs(const AttentionInputsParams& p) {
        check_attention_inputs(p);
        if (p.n_tokens == 0) return;
        // Rows of `heads` heads from x (token stride xs) to y (packed), for tokens
        // t0 .. t0 + n: one op over all of them where x is packed too.
        auto norm_rows = [&](const float* x, int64_t xs, float* y, const float* w, int64_t heads, bool rope,
                             int64_t t0, int64_t n) {
            RmsNormParams r;
            r.x = x + t0 * xs;
            r.y = y + t0 * heads * p.head_dim;
            r.w = w;
            r.rows = n * heads;
            r.n = p.head_dim;
            r.eps = p.eps;
            if (rope) {
                r.rope_inv_freq = p.rope_inv_freq;
                r.rope_pos = p.pos + t0;
                r.rope_heads = heads;
            }
            rms_norm(r);
        };
        auto norm = [&](const float* x, const float* src, float* y, const float* w, int64_t heads, bool rope) {
            if (p.q_src == nullptr) return norm_rows(x, heads * p.head_dim, y, w, heads, rope, 0, p.n_tokens);
            for (int64_t t = 0; t < p.n_tokens; ++t) norm_rows(src, p.src_stride, y, w, heads, rope, t, 1);
        };
        norm(p.q, p.q_src, p.q, p.q_w, p.n_heads, true);
        if (!p.store) return;
        norm(p.v_from_k ? p.k : p.v, p.v_from_k ? p.k_src : p.v_src, p.v, nullptr, p.n_kv_heads, false);
        norm(p.k, p.k_src, p.k, p.k_w, p.n_kv_heads, true);
        KvStoreParams s;
        s.k = p.k;
        s.v = p.v;
        s.k_pool = p.k_pool;
        s.v_pool = p.v_pool;
        s.kv_type = p.kv_type;
        s.row = p.n_kv_heads * p.head_dim;
        s.block_size = p.block_size;
        s.pos = p.pos;
        s.tables = p.tables;
        s.n_tokens = p.n_tokens;
        s.head_dim = p.head_dim;
        s.k_scale = p.k_scale;
        s.v_scale = p.v_scale;
        kv_store(s);
    }
    virtual void matmul(const MatmulParams& p) = 0;
    // Default: one matmul per weight (the CPU reference). Checks the shared input width.
    virtual void matmul_multi(const MultiMatmulParams& p) {
        check_matmul_multi(p);
        for (int i = 0; i < p.n; ++i) matmul({p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]});
    }
    virtual void get_rows(const GetRowsParams& p) = 0;
    virtual void geglu(const GegluParams& p) = 0;
    virtual void attention(const AttentionParams& p) = 0;
    virtual void moe_route(const MoeRouteParams& p) = 0;
    virtual void moe_group(const MoeGroupParams& p) = 0;
    // The routing, then the grouping of its result (g.ids == r.ids, g.n_tokens ==
    // r.n_tokens, g.k == r.k, g.n_experts == r.n_experts), as one op so a backend can
    // fuse the two for small batches; with r.router_x the router product first
    // (ops/moe.h). Default: the matmul, then the two ops.
    virtual void moe_route_group(const MoeRouteParams& r, const MoeGroupParams& g) {
        check_moe_route_group(r, g);
        if (r.router_x != nullptr) matmul(router_product(r));
        moe_route(routing_of(r));
        moe_group(g);
    }
    virtual void moe_matmul(const MoeMatmulParams& p) = 0;
    virtual void moe_combine(const MoeCombineParams& p) = 0;

    // Row movement and KV-cache writes (ops/gather.h).
    virtual void gather_rows(const GatherRowsParams& p) = 0;
    virtual void scatter_add(const ScatterAddParams& p) = 0;
    virtual void kv_store(const KvStoreParams& p) = 0;
    virtual void copy_blocks(const CopyBlocksParams& p) = 0;
    virtual void feed_tokens(const FeedTokensParams& p) = 0;

    // Index of each row's largest value (ops/sampling.h): greedy sampling without
    // copying the logits to the host.
    virtual void argmax_rows(const ArgmaxRowsParams& p) = 0;
    // The k largest values of each row and their indices (ops/sampling.h): top-k
    // sampling without copying the logits to the host. Scratch it needs for up to
    // `rows` rows of n values, any k (TopkRowsParams::scratch; 0: none).
    virtual void topk_rows(const TopkRowsParams& p) = 0;
    // Whether the engine may take top-k candidates from this backend (DecodeOutputs::
    // top_k). The CUDA kernel is opted in at build time (HF2Q_CUDA_TOPK) until it has
    // run on a GPU; topk_rows itself runs either way, for its tests.
    virtual bool has_topk_rows() const { return true; }
    virtual size_t topk_rows_scratch_bytes(int64_t rows, int64_t n) const {
        (void)rows;
        (void)n;
        return 0;
    }

    // Element-wise helpers over n contiguous floats.
    virtual void add(const float* a, const float* b, float* y, int64_t n) = 0;  // y = a + b
    virtual void scale(float* x, float s, int64_t n) = 0;                         // x *= s
    virtual void mul(const float* a, const float* b, float* y, int64_t n) = 0;  // y = a ⊙ b
    virtual void softcap(float* x, float cap, int64_t n) = 0;  // x = cap·tanh(x/cap)

private:
    struct AlignedDelete {
        void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
    };
    std::vector<std::unique_ptr<uint8_t[], AlignedDelete>> host_buffers_;
};

}  // namespace hf2q::ops
