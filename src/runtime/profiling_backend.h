// An ops::Backend decorator that times every call of the backend it wraps, for
// ContextOptions::profile_ops. Each op runs between two inner.synchronize() calls
// and is charged the host wall time in between, so on an asynchronous device the
// time is the op's own (kernel launch plus execution), at the price of losing the
// overlap between ops. Times are accumulated by op kind; matmuls are split by
// batch class and weight type, attention by sliding / full window.
//
// Only a context created with profile_ops holds one: without it the forward pass
// calls the real backend directly. While enabled, capture() returns no graph, so
// the profiled run executes op by op even where the backend would replay graphs.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/ggml_type.h"
#include "hf2q/engine.h"
#include "ops/backend.h"

namespace hf2q::runtime {

class ProfilingBackend final : public ops::Backend {
  public:
    explicit ProfilingBackend(std::unique_ptr<ops::Backend> inner);

    // While disabled, calls are forwarded without synchronizing or timing.
    void set_enabled(bool on) { enabled_ = on; }
    bool enabled() const { return enabled_; }
    OpProfile profile() const;
    void reset() { stats_.clear(); }

    // Matmuls of at most this many token rows count as "small" (decode-like).
    static constexpr int64_t kSmallMatmulTokens = 8;

    const char* name() const override { return inner_->name(); }

    bool host_memory() const override { return inner_->host_memory(); }
    void* alloc(size_t bytes) override { return inner_->alloc(bytes); }
    void upload(void* dst, const void* src, size_t bytes) override;
    void upload_async(void* dst, const void* src, size_t width, size_t rows, size_t pitch) override;
    void wait_uploads() override { inner_->wait_uploads(); }
    void download(void* dst, const void* src, size_t bytes) override;
    uint64_t fence() override { return inner_->fence(); }
    void wait_fence(uint64_t ticket) override { inner_->wait_fence(ticket); }
    void fill_zero(void* dst, size_t bytes) override;
    void synchronize() override { inner_->synchronize(); }
    size_t free_memory() const override { return inner_->free_memory(); }
    uint64_t allocated_bytes() const override { return inner_->allocated_bytes(); }
    const void* decode_layout(const ops::WeightView& w) override { return inner_->decode_layout(w); }
    const void* tile_layout(const ops::WeightView& w) override { return inner_->tile_layout(w); }
    const void* expert_layout(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert) override {
        return inner_->expert_layout(w, expert_bytes, n_expert);
    }
    const void* batch_layout(const ops::WeightView& w) override { return inner_->batch_layout(w); }
    uint64_t batch_layout_bytes(const ops::WeightView& w) const override { return inner_->batch_layout_bytes(w); }
    void batch_layouts(std::span<ops::WeightView* const> ws) override { inner_->batch_layouts(ws); }
    void* alloc_host(size_t bytes) override { return inner_->alloc_host(bytes); }
    void free_host(void* p) override { inner_->free_host(p); }
    // Graph replay would hide the individual ops (and a capture must not
    // synchronize), so while enabled there are no graphs: the caller runs the ops.
    std::unique_ptr<ops::Graph> capture(const std::function<void()>& body) override;
    void reserve_matmul_inputs(int64_t elems) override { inner_->reserve_matmul_inputs(elems); }
    // Forwarded untimed (they only order work); each op of either chain is still
    // timed on its own between two synchronize() calls.
    void begin_side() override { inner_->begin_side(); }
    void end_side() override { inner_->end_side(); }
    void join_side() override { inner_->join_side(); }

    void rms_norm(const ops::RmsNormParams& p) override;
    void residual_norms(const ops::ResidualNormsParams& p) override;
    void attention_inputs(const ops::AttentionInputsParams& p) override;
    int64_t prepared_tokens() const override { return inner_->prepared_tokens(); }
    int64_t prepared_expert_down_tokens() const override { return inner_->prepared_expert_down_tokens(); }
    size_t prepared_bytes(int64_t rows, int64_t n) const override { return inner_->prepared_bytes(rows, n); }
    bool reads_bf16_rows(int64_t n_tokens) const override { return inner_->reads_bf16_rows(n_tokens); }
    void rope(const ops::RopeParams& p) override;
    void matmul(const ops::MatmulParams& p) override;
    void matmul_multi(const ops::MultiMatmulParams& p) override;
    void get_rows(const ops::GetRowsParams& p) override;
    void geglu(const ops::GegluParams& p) override;
    void attention(const ops::AttentionParams& p) override;
    void moe_route(const ops::MoeRouteParams& p) override;
    void moe_group(const ops::MoeGroupParams& p) override;
    void moe_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g) override;
    void moe_matmul(const ops::MoeMatmulParams& p) override;
    void moe_combine(const ops::MoeCombineParams& p) override;

    void gather_rows(const ops::GatherRowsParams& p) override;
    void scatter_add(const ops::ScatterAddParams& p) override;
    void kv_store(const ops::KvStoreParams& p) override;
    void copy_blocks(const ops::CopyBlocksParams& p) override;
    void feed_tokens(const ops::FeedTokensParams& p) override;
    void argmax_rows(const ops::ArgmaxRowsParams& p) override;
    void topk_rows(const ops::TopkRowsParams& p) override;
    bool has_topk_rows() const override { return inner_->has_topk_rows(); }
    size_t topk_rows_scratch_bytes(int64_t rows, int64_t n) const override {
        return inner_->topk_rows_scratch_bytes(rows, n);
    }

    void add(const float* a, const float* b, float* y, int64_t n) override;
    void scale(float* x, float s, int64_t n) override;
    void mul(const float* a, const float* b, float* y, int64_t n) override;
    void softcap(float* x, float cap, int64_t n) override;

  private:
    // One row of the profile. `variant` refines an op: the matmul batch class, the
    // attention kind; `type` is the weight type of (moe_)matmul and get_rows.
    enum class Op : uint8_t {
        upload,
        download,
        fill_zero,
        rms_norm,
        residual_norms,
        attention_inputs,
        rope,
        matmul,
        get_rows,
        geglu,
        attention,
        moe_route,
        moe_group,
        moe_route_group,
        moe_matmul,
        moe_combine,
        gather_rows,
        scatter_add,
        kv_store,
        copy_blocks,
        feed_tokens,
        argmax_rows,
        topk_rows,
        add,
        scale,
        mul,
        softcap,
    };
    struct Key {
        Op op;
        uint8_t variant = 0;
        GgmlType type = GgmlType::F32;
        auto operator<=>(const Key&) const = default;
    };
    struct Stat {
        int64_t calls = 0;
        double seconds = 0.0;
    };
    static std::string key_name(const Key& k);

    template <class F>
    void timed(const Key& k, F&& run);

    std::unique_ptr<ops::Backend> inner_;
    bool enabled_ = true;
    std::map<Key, Stat> stats_;
};

}  // namespace hf2q::runtime
