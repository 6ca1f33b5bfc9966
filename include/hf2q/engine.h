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
#include <span>
#include <string>
#include <vector>

#include "hf2q/error.h"

namespace hf2q {

namespace runtime {
class ModelImpl;
class ContextImpl;
}  // namespace runtime

enum class BackendKind { cpu, cuda };

// Device backends' BF16 copies of the dense matrices (ModelLoadOptions::batch_copy).
enum class BatchCopy {
    off,
    // On when all the copies together take at most a quarter of the device memory
    // free after the weights (the KV cache keeps the rest): the 26B-A4B's 4.8 GB on an
    // H100 or H200, not the 31B's (about 60 GB). Off on host backends.
    automatic,
    on,  // every copy that leaves the backend's headroom free
};

struct ModelLoadOptions {
    bool progress = false;  // reserved: progress bar while touching the weights
    // Device backends may keep a second copy of the LM head in a layout their
    // one-token matmul reads faster (CUDA: a Q6_K head, about its size again: 0.6 GB
    // for the 26B-A4B; its tg128 and E4B's 2-3 % faster). Same results bit for bit.
    bool decode_layouts = true;
    // Device backends may keep a BF16 copy of every dense matrix (attention, the dense
    // MLP, the LM head; not the experts), so that matmuls of 17+ tokens (batched decode,
    // prompt chunks) do not expand the quantized rows to BF16 on every call. Costs 2
    // bytes per value: about 4.8 GB for the 26B-A4B. Same results bit for bit. H200,
    // 26B-A4B Q4_K_M: 64 sequences 2.8k -> 3.3k tokens/s, pp512 +6 %
    // (docs/performance.md).
    BatchCopy batch_copy = BatchCopy::automatic;
    // Device backends may keep a second copy of the experts in a layout their
    // batched-decode expert product reads faster (CUDA: Q4_K experts with their
    // scales decoded, 11 % more than their size: about 9.5 GB for the 26B-A4B's
    // gate_up), made after the batch copies where it leaves room. Its scales are
    // rounded to f16, so batched results move by rounding (about 2^-12 of a value).
    bool expert_layouts = true;
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

// Arithmetic of batched work on a device backend: tensor cores (BF16 matmul and F16
// attention operands, f32 accumulation, f32 residual stream) or f32 throughout
// (slower; the reference precision). The CPU backend always computes in f32.
enum class DevicePrecision { tensor_cores, f32 };

// Element type of the KV cache: f16 (llama.cpp's default: half the memory, so twice
// the tokens fit, and half the bytes each decode step reads), f32 (the values as
// computed) or e4m3 (FP8 E4M3 without a scale, as vLLM's fp8 cache: half of f16 again,
// at 3 mantissa bits; values from ±448 up saturate) or int8 (the bytes of e4m3 plus
// 4 per row of head_dim values: 8-bit codes with a scale per (position, KV head) row,
// as llama.cpp's q8_0 cache with one scale per row; its rounding is at most 1/254 of
// the row's largest value: about a third of e4m3's error, measured, and still well
// above f16's; docs/performance.md). K and V are rounded once, when stored; attention
// reads them back exactly and computes in f32 on every backend, so CPU and GPU still
// agree.
enum class KvCacheType { f16, f32, e4m3, int8 };

// The bytes one generation step of `batch` sequences must read when each holds
// `context` tokens before the step (its new token at position `context`), for
// throughput reports (hf2q bench's GB/s): every dense weight the forward pass reads
// and the LM head once, in their GGUF formats; of each stacked expert tensor the
// expected share of experts that `batch` tokens route to, 1 − (1 − k/E)^batch
// (routing taken as uniform: a skewed router touches fewer); the embedding rows; and
// the keys and values each layer's attention reads in the cache type kv (context + 1
// positions, at most the window on sliding layers; layers that share another layer's
// cache read it again). A lower bound on a step's memory traffic: a backend that
// reads BF16 copies of weights, or re-reads data, moves more.
double decode_step_bytes(const Model& model, int64_t batch, int64_t context, KvCacheType kv);

struct ContextOptions {
    BackendKind backend = BackendKind::cpu;  // where this context computes
    int32_t n_seq_max = 1;      // sequence ids are 0 .. n_seq_max-1
    int32_t n_ctx = 4096;       // max positions per sequence
    int32_t n_ubatch = 512;     // tokens per forward micro-batch (activation memory)
    int32_t kv_block_size = 16; // tokens per KV block
    int32_t n_threads = 0;      // CPU backend threads; 0: all hardware threads
    MatmulObserver matmul_observer;  // optional
    DevicePrecision device_precision = DevicePrecision::tensor_cores;
    bool graphs = true;         // replay decode-sized batches as device graphs (CUDA graphs)
    // Run independent branches of a layer concurrently where the backend can (CUDA: a
    // MoE layer's routed experts on a second stream beside its dense MLP, in batches
    // of up to 64 tokens; the products of one input, such as q, k and v, on streams of
    // their own in batches of 17-128 tokens). Off: one after the other; the results are
    // the same bit for bit.
    bool concurrent_branches = true;
    // Capacity of the full-attention KV cache, shared by all sequences through the
    // paged block tables (each sequence still ends at n_ctx). At most one of:
    int64_t kv_tokens = 0;         // tokens; 0: n_seq_max × n_ctx (every sequence full)
    double kv_memory_fraction = 0; // fraction (0, 1] of the device memory left free
                                   // after weights and activations (device backends)
    KvCacheType kv_type = KvCacheType::f16;
    // Time every backend op (synchronizing the device before and after each one) and
    // accumulate the times by op kind: Context::op_profile(). Slows decoding; when
    // false the profiler is not in the call path at all.
    bool profile_ops = false;
};

// Accumulated op times of a context created with profile_ops. Entries are op kinds,
// matmuls further split by class and weight type ("matmul (≤8 tokens) q4_K",
// "matmul (batched) q6_K") and attention by kind ("attention (sliding)",
// "attention (full)"); host-device copies appear as "upload" / "download".
struct OpProfile {
    struct Entry {
        std::string name;
        int64_t calls = 0;
        double seconds = 0.0;  // wall time, device synchronized around each call
    };
    std::vector<Entry> entries;  // by decreasing seconds

    double total_seconds() const {
        double s = 0.0;
        for (const auto& e : entries) s += e.seconds;
        return s;
    }
};

// What Context::decode() returns for the tokens marked `logits`.
enum class DecodeOutputs {
    logits,  // their logits, n_vocab floats each: Context::logits(i)
    // Only the index of each one's largest logit (the lowest index on ties, as a
    // greedy sampler picks it), computed on the backend after the final soft-cap:
    // Context::argmax(i). A greedy step then copies one int per output to the host
    // instead of n_vocab floats (262,144 for Gemma 4) and scans nothing on the CPU.
    argmax,
    // Each one's k largest logits with their ids (k: decode's top_k argument, 1 ..
    // kMaxTopK), largest first and the lower id first among equal logits: exactly the
    // candidates a top-k sampler keeps (runtime::init_candidates_top_k), computed on
    // the backend: Context::top_k(i). A top-k sampled step then copies k pairs per
    // output instead of n_vocab floats, and the host draws the same token from them.
    top_k,
};

// The most candidates a DecodeOutputs::top_k decode returns per output.
inline constexpr int32_t kMaxTopK = 256;

// One candidate of Context::top_k.
struct TopLogit {
    int32_t id = 0;
    float logit = 0.0f;
};

// BatchToken::token for "the id the previous decode's argmax gave this sequence":
// that decode returned DecodeOutputs::argmax with an output for the sequence (its
// last one) in its last micro-batch, and this token is in the batch's first
// micro-batch. The id never visits the host: a greedy generator queues step k+1
// before it reads step k's id (Context::argmax(i, 1)), so the device never waits for
// the host between steps. Where step k's output was an argmax error (NaN, +inf, all
// -inf), step k+1 embeds token 0 and reading step k's id throws; drop step k+1 then
// (seq_truncate).
inline constexpr int32_t kPreviousArgmax = -1;

// One token of a batch.
struct BatchToken {
    int32_t token = 0;  // a vocabulary id, or kPreviousArgmax
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
    // `outputs` says what the tokens marked `logits` return. With DecodeOutputs::argmax
    // a device backend returns once the work is queued (argmax() waits for the ids);
    // with logits, once they are in host memory.
    // `top_k` is the candidates per output of a DecodeOutputs::top_k decode (1 ..
    // kMaxTopK) and must be 0 otherwise.
    void decode(const std::vector<BatchToken>& batch, DecodeOutputs outputs = DecodeOutputs::logits,
                int32_t top_k = 0);

    // Logits of the i-th token marked `logits` in the last decode, [n_vocab] floats.
    // Throws unless that decode returned logits.
    const float* logits(int32_t i) const;
    // Index of the largest logit of the i-th token marked `logits` in the last decode
    // (decodes_back 0) or the one before it (1: kept until the next decode; how a
    // pipelined greedy loop reads step k after queuing step k+1), lowest index on
    // ties; waits for the ids. Throws unless that decode returned DecodeOutputs::argmax,
    // and, as a greedy sampler does, when those logits hold a NaN or +inf or are all -inf.
    int32_t argmax(int32_t i, int32_t decodes_back = 0) const;
    // The candidates of the i-th token marked `logits` in the last decode: its top_k
    // largest logits above -inf (fewer where fewer are), in the order above. Throws
    // unless that decode returned DecodeOutputs::top_k, and, as the sampler does, when
    // those logits hold a NaN or +inf or are all -inf.
    std::span<const TopLogit> top_k(int32_t i) const;
    // Whether this context's backend returns top-k candidates (DecodeOutputs::top_k);
    // where not, such a decode is an error and samplers read logits.
    bool has_top_k() const;
    int32_t n_outputs() const;  // of the last decode
    int64_t n_vocab() const;

    // Sequence operations.
    int32_t seq_length(int32_t seq) const;         // positions held
    void seq_remove(int32_t seq);                  // drop all of a sequence
    void seq_truncate(int32_t seq, int32_t pos);   // keep positions < pos
    void seq_fork(int32_t src, int32_t dst);       // dst shares src's prefix (copy on write)

    // Tokens the full-attention KV cache holds across all sequences (sliding-window
    // layers keep a window per sequence and never limit this).
    int64_t kv_capacity_tokens() const;
    // Device memory the model's weight copies take on this context's backend
    // (ModelLoadOptions::decode_layouts and batch_copy; made once per model and
    // backend, shared by its contexts); 0 on the CPU.
    uint64_t weight_copy_bytes() const;

    // Op times accumulated since creation or the last reset_op_profile() (empty
    // unless the context was created with profile_ops).
    OpProfile op_profile() const;
    void reset_op_profile();

    const ContextOptions& options() const;
    runtime::ContextImpl& impl() const { return *impl_; }

private:
    Context() = default;
    std::unique_ptr<runtime::ContextImpl> impl_;
};

}  // namespace hf2q
