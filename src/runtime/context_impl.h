// Internal state behind hf2q::Context: backend, paged KV cache (block tables plus
// one K and one V pool per cache-owning layer), the forward pass with its
// preallocated activations, and the logits (or argmax ids) of the last decode.
#pragma once

#include <memory>
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

    void decode(const std::vector<BatchToken>& batch, DecodeOutputs outputs);
    const float* logits(int32_t i) const;
    int32_t argmax(int32_t i) const;
    int32_t n_outputs() const { return n_outputs_; }
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
    void run_ubatch(const std::vector<BatchToken>& batch, size_t begin, size_t end);
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

    // Per-micro-batch inputs, built on the host and uploaded to backend buffers of
    // n_ubatch entries. Block tables are flattened to [seqs in micro-batch][width]
    // per group, and each token points at its sequence's row.
    int64_t table_width_ = 0;
    std::vector<int32_t> h_tokens_, h_pos_, h_out_rows_, h_tables_[2], h_table_len_[2];
    std::vector<const int32_t*> h_table_ptr_[2];
    int32_t *d_tokens_, *d_pos_, *d_out_rows_, *d_tables_[2], *d_table_len_[2];
    const int32_t** d_table_ptr_[2];
    int32_t *d_copy_src_, *d_copy_dst_;  // copy-on-write block ids, [n_seq_max]
    float* logits_ = nullptr;    // [n_outputs][n_vocab], host memory from the backend
    size_t logits_cap_ = 0;      // floats allocated
    void grow_logits(size_t floats);
    gemma4::HeadOutput output_slots(int64_t n_out);
    // DecodeOutputs::argmax: each micro-batch's ids land in ids_stage_ ([n_ubatch],
    // host memory from the backend, page-locked for a GPU) and are appended to ids_.
    int32_t* ids_stage_ = nullptr;
    std::vector<int32_t> ids_;   // [n_outputs], ops::argmax_rows results
    DecodeOutputs outputs_ = DecodeOutputs::logits;  // what the last decode returned
    int32_t n_outputs_ = 0;
};

}  // namespace hf2q::runtime
