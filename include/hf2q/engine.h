// hf2q public engine API.
//
// A Model is loaded once from a GGUF file (weights memory-mapped and used in their
// block formats). A Context holds the paged KV cache and preallocated activations
// for up to `n_seq_max` sequences. Context::decode() runs ONE batched forward pass
// over a flat list of tokens from any number of sequences: prefill, decode, mixed
// batches, chunked prefill and speculative verification are all this call.
//
// Errors (bad files, bad batches, cache full) throw hf2q::Error (src/core/error.h is
// re-exported here as hf2q/error.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hf2q/error.h"

namespace hf2q {

namespace runtime {
class ModelImpl;
class ContextImpl;
}  // namespace runtime

enum class BackendKind { cpu, cuda };

struct ModelLoadOptions {
    bool progress = false;  // reserved: progress bar while touching the weights
};

// Facts about a loaded model for frontends.
struct ModelInfo {
    std::string architecture;  // "gemma4"
    std::string name;          // general.name, may be empty
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_ctx_train = 0;
    int64_t n_params = 0;
    uint64_t n_bytes = 0;      // tensor data bytes
    // Work per token, for throughput reports: weight elements multiplied per token
    // (all matmuls except the LM head; MoE counts top-k of the experts) and the
    // bytes of those weights; the LM head separately (it runs on output rows only).
    int64_t n_active_params = 0;
    uint64_t n_active_bytes = 0;
    int64_t n_head_params = 0;
    uint64_t n_head_bytes = 0;
};

class Model {
public:
    static std::unique_ptr<Model> load(const std::string& path, const ModelLoadOptions& opts = {});
    ~Model();
    const ModelInfo& info() const;
    runtime::ModelImpl& impl() const { return *impl_; }

private:
    Model() = default;
    std::unique_ptr<runtime::ModelImpl> impl_;
};

// Observer of matmul inputs, for importance-matrix collection and debugging:
// called before each projection with the weight's GGUF tensor name, the expert
// index (-1 for a plain matrix) and the input rows [n_rows][n_cols] in host memory.
// Not called for the LM head. Free when unset.
using MatmulObserver = std::function<void(const std::string& tensor, int32_t expert, const float* x,
                                          int64_t n_rows, int64_t n_cols)>;

struct ContextOptions {
    BackendKind backend = BackendKind::cpu;  // where this context computes
    int32_t n_seq_max = 1;      // sequence ids are 0 .. n_seq_max-1
    int32_t n_ctx = 4096;       // max positions per sequence
    int32_t n_ubatch = 512;     // tokens per forward micro-batch (activation memory)
    int32_t kv_block_size = 16; // tokens per KV block
    int32_t n_threads = 0;      // CPU backend threads; 0: all hardware threads
    MatmulObserver matmul_observer;  // optional
};

// One token of a batch.
struct BatchToken {
    int32_t token = 0;
    int32_t seq = 0;       // sequence id
    int32_t pos = 0;       // position in its sequence; must continue the sequence
    bool logits = false;   // return logits for this token
};

class Context {
public:
    static std::unique_ptr<Context> create(const Model& model, const ContextOptions& opts);
    ~Context();

    // Runs the batch. Within a sequence, tokens must appear in increasing position
    // order, the first one at the sequence's current length. A token sees only
    // earlier (and equal-position) tokens of its own sequence. Throws on a bad batch
    // (nothing is written to the cache then) or when the KV cache is full.
    void decode(const std::vector<BatchToken>& batch);

    // Logits of the i-th token marked `logits` in the last decode, [n_vocab] floats.
    const float* logits(int32_t i) const;
    int32_t n_outputs() const;
    int64_t n_vocab() const;

    // Sequence operations.
    int32_t seq_length(int32_t seq) const;         // positions held
    void seq_remove(int32_t seq);                  // drop all of a sequence
    void seq_truncate(int32_t seq, int32_t pos);   // keep positions < pos
    void seq_fork(int32_t src, int32_t dst);       // dst shares src's prefix (copy on write)

    const ContextOptions& options() const;
    runtime::ContextImpl& impl() const { return *impl_; }

private:
    Context() = default;
    std::unique_ptr<runtime::ContextImpl> impl_;
};

}  // namespace hf2q
