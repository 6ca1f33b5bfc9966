// Internal state behind hf2q::Context: backend, paged KV cache (block tables plus
// one K and one V pool per cache-owning layer), the forward pass with its
// preallocated activations, and the logits (or argmax ids) of the last decode.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "hf2q/engine.h"
#include "kv/block_tables.h"
#include "models/gemma4/forward.h"
#include "ops/backend.h"
#include "runtime/model_impl.h"
#include "runtime/profiling_backend.h"

namespace hf2q::runtime {

class ContextImpl {
public:
    ContextImpl(const ModelImpl& model, const ContextOptions& opts);
    ~ContextImpl();
    ContextImpl(const ContextImpl&) = delete;
    ContextImpl& operator=(const ContextImpl&) = delete;

    void decode(const std::vector<BatchToken>& batch, DecodeOutputs outputs, int32_t top_k);
    const float* logits(int32_t i) const;
    int32_t argmax(int32_t i, int32_t decodes_back) const;
    std::span<const TopLogit> top_k(int32_t i) const;
    bool has_top_k() const { return backend_->has_topk_rows(); }
    int32_t n_outputs() const { return results_[cur_].n_outputs; }
    int64_t n_vocab() const { return model_.config().n_vocab; }
    const ContextOptions& options() const { return opts_; }
    OpProfile op_profile() const { return profiler_ ? profiler_->profile() : OpProfile{}; }
    void reset_op_profile() {
        if (profiler_) profiler_->reset();
    }
    kv::BlockTables& tables() { return *tables_; }
    const kv::BlockTables& tables() const { return *tables_; }

    // KV positions the cache can hold for one sequence / in total (full layers).
    int64_t kv_capacity_tokens() const;
    uint64_t weight_copy_bytes() const { return weights_->copy_bytes; }
    void allocate_kv();

private:
    void validate(const std::vector<BatchToken>& batch) const;
    void check_feed(size_t i, int32_t seq) const;
    void run_ubatch(const std::vector<BatchToken>& batch, size_t begin, size_t end, bool last);
    void apply_copies(const std::vector<kv::BlockCopy>& copies);
    gemma4::BatchView upload_ubatch(const std::vector<BatchToken>& batch, size_t begin, size_t end);

    const ModelImpl& model_;
    ContextOptions opts_;
    std::unique_ptr<ops::Backend> backend_;  // wrapped by the profiler when profile_ops
    ProfilingBackend* profiler_ = nullptr;    // that wrapper, owned by backend_; else null
    const gemma4::Weights* weights_ = nullptr;  // the model's weights in backend memory (owned by it)
    std::unique_ptr<kv::BlockTables> tables_;
    int64_t full_blocks_ = 0;                // blocks of each full-attention pool
    std::vector<gemma4::LayerKv> pools_;     // per layer: own pools, null if KV-shared
    std::vector<gemma4::LayerKv> layer_kv_;  // per layer: the pools it reads
    std::vector<int64_t> pool_row_;          // per layer: values per cached token
    ops::KvType kv_type_ = ops::KvType::f16;  // element type of every pool
    std::unique_ptr<gemma4::Forward> forward_;

    // Per-micro-batch inputs, built on the host in one block of page-locked memory
    // (alloc_host) and uploaded by one asynchronous copy (upload_async) into its mirror
    // in backend memory: kStepRows per-token rows (tokens, positions, output rows, the
    // kPreviousArgmax source rows, and per group the table length and a pointer to the
    // token's table row) at the micro-batch's own pitch (its tokens' pointers, rounded
    // to 16 bytes: a batch shape always gets the same addresses, which graphs record),
    // then the block tables as [sequences of the micro-batch][group][width]. One copy
    // that does not wait replaces nine that each waited for the device (pageable
    // sources): 36-58 µs less host time between two decode steps (H200, 26B-A4B tg128
    // 455-458 -> 465-468 tokens/s; docs/performance.md, session 28); one instead of
    // two (rows, then tables) is worth ~6 µs a pipelined step (session 32).
    enum StepRow { kTokens, kPos, kOutRows, kFeed, kTableLen0, kTableLen1, kTablePtr0, kTablePtr1, kStepRows };
    int64_t table_width_ = 0;
    size_t step_pitch_ = 0;                // bytes between two rows (of the current micro-batch)
    // Frees alloc_host memory once no upload_async reads it (also when the constructor throws).
    struct HostFree {
        ops::Backend* backend;
        void operator()(uint8_t* p) const {
            backend->wait_uploads();
            backend->free_host(p);
        }
    };
    std::unique_ptr<uint8_t, HostFree> h_step_{nullptr, HostFree{nullptr}};  // host block
    uint8_t* d_step_ = nullptr;            // its mirror in backend memory
    template <class T>
    T* step_row(uint8_t* base, StepRow r) const {
        return reinterpret_cast<T*>(base + static_cast<size_t>(r) * step_pitch_);
    }
    // Group g's row of a per-group pair (kTableLen0 or kTablePtr0, then group 1's).
    static StepRow group_row(StepRow group0, int g) { return static_cast<StepRow>(group0 + g); }
    int32_t* table_row(uint8_t* base, size_t seq_row, int g) const {
        return reinterpret_cast<int32_t*>(base + kStepRows * step_pitch_) +
               (seq_row * 2 + static_cast<size_t>(g)) * static_cast<size_t>(table_width_);
    }
    int32_t *d_copy_src_, *d_copy_dst_;  // copy-on-write block ids, [n_seq_max]
    float* logits_ = nullptr;    // [n_outputs][n_vocab], host memory from the backend
    size_t logits_cap_ = 0;      // floats allocated
    void grow_logits(size_t floats);
    gemma4::HeadOutput output_slots(int64_t n_out);

    // What a decode returned. An argmax decode's last micro-batch leaves its ids on
    // their way (Forward::run's fence ticket) into the staging buffer of its record,
    // which the backend writes directly (ops::ArgmaxRowsParams::host_out: no copy on
    // the stream between two steps), so a greedy generator queues the next step, which
    // takes them on the device (kPreviousArgmax), before it waits for them. The two
    // records alternate, and so do their buffers: the step queued next writes the
    // other one.
    struct Result {
        DecodeOutputs mode = DecodeOutputs::logits;
        int32_t n_outputs = 0;
        std::vector<int32_t> ids;  // [n_outputs] once landed: ops::argmax_rows results
        uint64_t ticket = 0;       // the last micro-batch's ids: wait_fence(ticket)
        int32_t n_pending = 0;     // ... this many, in ids_stage_[slot], not yet in ids
        // Per sequence the row of Forward's device ids holding its last output of the
        // decode's last micro-batch (what kPreviousArgmax takes), -1 none; argmax only.
        std::vector<int32_t> feed_row;
        // top_k: k, a micro-batch's rows as the forward pass writes them ([n][k] ids and
        // values, [n] status), then every output's candidates above -inf in `top`, from
        // top_begin[i], top_status[i] of them (or an ops::kArgmax* code).
        int32_t k = 0;
        std::vector<int32_t> head_ids, head_status;
        std::vector<float> head_values;
        std::vector<TopLogit> top;
        std::vector<size_t> top_begin;
        std::vector<int32_t> top_status;
    };
    mutable Result results_[2];
    int cur_ = 0;  // results_[cur_]: the last decode; results_[cur_ ^ 1]: the one before
    void land(int slot) const;  // moves a result's pending ids into its ids
    int32_t* ids_stage_[2] = {nullptr, nullptr};  // [n_ubatch] each, host memory from the backend
};

}  // namespace hf2q::runtime
