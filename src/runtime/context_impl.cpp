#include "runtime/context_impl.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"
#include "core/progress.h"
#include "runtime/backend_factory.h"

namespace hf2q::runtime {

static_assert(kMaxTopK == ops::kTopkMax, "the engine's top-k bound is the op's");
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_options(const ContextOptions& o) {
    if (o.n_seq_max <= 0 || o.n_seq_max > 4096) fail("number of sequences must be in [1, 4096], got ", o.n_seq_max);
    if (o.n_ctx <= 0) fail("context size must be positive, got ", o.n_ctx);
    if (o.n_ubatch <= 0) fail("micro-batch size must be positive, got ", o.n_ubatch);
    if (o.kv_tokens < 0) fail("KV cache size must not be negative, got ", o.kv_tokens, " tokens");
    if (!(o.kv_memory_fraction >= 0.0 && o.kv_memory_fraction <= 1.0))
        fail("KV memory fraction must be in (0, 1], got ", o.kv_memory_fraction);
    if (o.kv_tokens > 0 && o.kv_memory_fraction > 0)
        fail("give the KV cache size either in tokens or as a memory fraction, not both");
    if (o.kv_block_size <= 0 || o.kv_block_size > 4096)
        fail("KV block size must be in [1, 4096], got ", o.kv_block_size);
}

}  // namespace

ContextImpl::ContextImpl(const ModelImpl& model, const ContextOptions& opts) : model_(model), opts_(opts) {
    check_options(opts);
    const auto& c = model.config();
    backend_ = make_backend(opts.backend, opts.n_threads, opts.device_precision == DevicePrecision::f32,
                            opts.concurrent_branches);
    if (opts.profile_ops) {
        auto profiler = std::make_unique<ProfilingBackend>(std::move(backend_));
        profiler_ = profiler.get();
        // Set-up copies (weights to the device, zeroed pools) are not decoding work.
        profiler_->set_enabled(false);
        backend_ = std::move(profiler);
    }
    // Device weights belong to the model: uploaded by the first context, shared after.
    weights_ = &model.weights_on(opts.backend);
    // Activations before the cache, so a memory fraction sees what they take.
    forward_ = std::make_unique<gemma4::Forward>(c, *weights_, *backend_, opts.n_ubatch, opts.matmul_observer);
    forward_->enable_graphs(opts.graphs);

    const int64_t B = opts.kv_block_size;
    d_copy_src_ = backend_->alloc_array<int32_t>(sz(opts.n_seq_max));
    d_copy_dst_ = backend_->alloc_array<int32_t>(sz(opts.n_seq_max));
    const size_t U = sz(opts.n_ubatch);
    const size_t max_seqs = std::min<size_t>(U, sz(opts.n_seq_max));
    table_width_ = ceil_div(opts.n_ctx, B);
    // The per-token rows hold pointers at most; 16-byte aligned rows and tables. Sized
    // for n_ubatch tokens: each micro-batch packs its rows at its own pitch (upload_ubatch).
    const auto pitch = checked_align_up(U * sizeof(void*), 16);
    const auto rows_bytes = pitch ? checked_mul(*pitch, kStepRows) : std::nullopt;
    const auto tables = checked_mul(max_seqs * 2 * sizeof(int32_t), static_cast<uint64_t>(table_width_));
    const auto block = rows_bytes && tables ? checked_add(*rows_bytes, *tables) : std::nullopt;
    if (!block)
        fail("the micro-batch inputs of ", opts.n_ubatch, " tokens and ", max_seqs, " sequences of ", opts.n_ctx,
             " positions overflow a size; lower --ubatch, --ctx-size or --parallel");
    const size_t bytes = static_cast<size_t>(*block);
    h_step_ = std::unique_ptr<uint8_t, HostFree>(static_cast<uint8_t*>(backend_->alloc_host(bytes)),
                                                 HostFree{backend_.get()});
    d_step_ = static_cast<uint8_t*>(backend_->alloc(bytes));
    allocate_kv();
    if (profiler_) profiler_->set_enabled(true);
}

// Full layers keep every block of a sequence; their blocks come from one pool shared
// by all sequences, sized by kv_tokens, kv_memory_fraction, or n_seq_max × n_ctx. A
// sliding layer holds at most the window, one position more (kv::BlockTables keeps
// the newest position undoable) and one micro-batch per sequence at any time (blocks
// leaving the window are freed after each micro-batch): window + n_ubatch positions,
// which span at most ceil((window - 1 + n_ubatch) / B) + 2 blocks.
void ContextImpl::allocate_kv() {
    const auto& c = model_.config();
    const ContextOptions& opts = opts_;
    const int64_t B = opts.kv_block_size;
    const int64_t every_full = opts.n_seq_max * ceil_div(opts.n_ctx, B);
    const int64_t swa_per_seq = ceil_div(c.sliding_window - 1 + opts.n_ubatch, B) + 2;
    const int64_t swa_blocks = std::min(every_full, opts.n_seq_max * swa_per_seq);
    pool_row_.resize(sz(c.n_layer));
    kv_type_ = kv_element_type(opts.kv_type);
    uint64_t full_block_bytes = 0, swa_block_bytes = 0;  // K and V of every cache-owning layer
    for (int64_t il = 0; il < c.n_layer; ++il) {
        pool_row_[sz(il)] = c.kv_heads(il) * c.head_dim(il);
        if (!c.has_kv(il)) continue;
        (c.is_sliding(il) ? swa_block_bytes : full_block_bytes) +=
            2 * static_cast<uint64_t>(B * c.kv_heads(il)) *
            static_cast<uint64_t>(ops::kv_row_bytes(kv_type_, c.head_dim(il)));
    }
    int64_t full_blocks = every_full;
    if (opts.kv_tokens > 0) {
        full_blocks = std::min(every_full, ceil_div(opts.kv_tokens, B));
    } else if (opts.kv_memory_fraction > 0) {
        const size_t free_b = backend_->free_memory();
        if (free_b == 0) fail("a KV memory fraction needs a device backend; give the cache size in tokens instead");
        const double budget = static_cast<double>(free_b) * opts.kv_memory_fraction -
                              static_cast<double>(swa_blocks) * static_cast<double>(swa_block_bytes);
        const double per_block = static_cast<double>(std::max<uint64_t>(full_block_bytes, 1));
        full_blocks = std::min(every_full, static_cast<int64_t>(std::max(0.0, budget / per_block)));
        if (full_blocks < ceil_div(opts.n_ubatch, B) + 1)
            fail("the KV cache gets ", format_bytes(static_cast<uint64_t>(std::max(0.0, budget))), " (",
                 opts.kv_memory_fraction, " of ", format_bytes(free_b),
                 " free after weights and activations): too little for one micro-batch; raise the fraction, "
                 "lower --ubatch or use a smaller quant type");
    }
    kv::TablesOptions to;
    to.block_size = opts.kv_block_size;
    to.n_seq_max = opts.n_seq_max;
    to.n_ctx = opts.n_ctx;
    to.groups.resize(2);
    to.groups[gemma4::kFullGroup] = {0, full_blocks};
    to.groups[gemma4::kSlidingGroup] = {static_cast<int32_t>(c.sliding_window), swa_blocks};
    tables_ = std::make_unique<kv::BlockTables>(to);
    full_blocks_ = full_blocks;

    pools_.resize(sz(c.n_layer));
    layer_kv_.resize(sz(c.n_layer));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (!c.has_kv(il)) continue;
        int64_t blocks = c.is_sliding(il) ? swa_blocks : full_blocks;
        auto n = checked_mul(static_cast<uint64_t>(blocks * B), static_cast<uint64_t>(pool_row_[sz(il)]));
        if (!n || *n > (1ull << 40)) fail("KV cache for layer ", il, " is too large; lower --ctx-size or --parallel");
        auto alloc = [&]() -> void* {
            if (kv_type_ == ops::KvType::f16) return backend_->alloc_array<uint16_t>(*n);
            if (ops::kv_type_bytes(kv_type_) == 1) return backend_->alloc_array<uint8_t>(*n);
            return backend_->alloc_array<float>(*n);
        };
        pools_[sz(il)].k = alloc();
        pools_[sz(il)].v = alloc();
        if (ops::kv_type_scaled(kv_type_)) {  // a scale per (slot, KV head) row
            pools_[sz(il)].k_scale = backend_->alloc_array<float>(*n / static_cast<uint64_t>(c.head_dim(il)));
            pools_[sz(il)].v_scale = backend_->alloc_array<float>(*n / static_cast<uint64_t>(c.head_dim(il)));
        }
        pools_[sz(il)].type = kv_type_;
        pools_[sz(il)].n_blocks = blocks;
    }
    for (int64_t il = 0; il < c.n_layer; ++il) layer_kv_[sz(il)] = pools_[sz(c.kv_source[sz(il)])];
}

int64_t ContextImpl::kv_capacity_tokens() const { return full_blocks_ * opts_.kv_block_size; }

// Every token must name a valid sequence and vocabulary entry, and each sequence's
// tokens must continue it at consecutive positions.
void ContextImpl::validate(const std::vector<BatchToken>& batch) const {
    const int64_t V = n_vocab();
    std::vector<int32_t> next(sz(opts_.n_seq_max), -1);
    for (size_t i = 0; i < batch.size(); ++i) {
        const BatchToken& t = batch[i];
        if (t.seq < 0 || t.seq >= opts_.n_seq_max)
            fail("batch token ", i, ": sequence id ", t.seq, " out of range [0, ", opts_.n_seq_max, ")");
        if (t.token == kPreviousArgmax) {
            check_feed(i, t.seq);
        } else if (t.token < 0 || t.token >= V) {
            fail("batch token ", i, ": token id ", t.token, " out of range [0, ", V, ")");
        }
        int32_t& expect = next[sz(t.seq)];
        if (expect < 0) expect = tables_->seq_length(t.seq);
        if (t.pos != expect)
            fail("batch token ", i, ": sequence ", t.seq, " expects position ", expect, ", got ", t.pos,
                 " (positions must continue each sequence in order)");
        if (t.pos >= opts_.n_ctx)
            fail("batch token ", i, ": position ", t.pos, " exceeds the context size ", opts_.n_ctx);
        ++expect;
    }
}

// A kPreviousArgmax token takes its sequence's id from the previous decode's last
// micro-batch, on the backend, before this decode's first micro-batch overwrites it.
void ContextImpl::check_feed(size_t i, int32_t seq) const {
    const Result& prev = results_[cur_];
    if (prev.mode != DecodeOutputs::argmax)
        fail("batch token ", i, ": kPreviousArgmax needs the previous decode to return argmax ids");
    if (prev.feed_row.empty() || prev.feed_row[sz(seq)] < 0)
        fail("batch token ", i, ": kPreviousArgmax needs an output of sequence ", seq,
             " in the previous decode's last micro-batch (", opts_.n_ubatch, " tokens)");
    if (i >= sz(opts_.n_ubatch))
        fail("batch token ", i, ": a kPreviousArgmax token must be among the first ", opts_.n_ubatch,
             " tokens of the batch (its first micro-batch)");
}

// Copy on write: at most one block per (sequence, group) is copied per micro-batch
// (the shared, partially filled block the sequence appends to).
void ContextImpl::apply_copies(const std::vector<kv::BlockCopy>& copies) {
    const auto& c = model_.config();
    for (int g = 0; g < 2; ++g) {
        std::vector<int32_t> src, dst;
        for (const auto& cp : copies)
            if (cp.group == g) {
                src.push_back(cp.src);
                dst.push_back(cp.dst);
            }
        if (src.empty()) continue;
        HF2Q_ASSERT(src.size() <= sz(opts_.n_seq_max));
        backend_->upload(d_copy_src_, src.data(), src.size() * sizeof(int32_t));
        backend_->upload(d_copy_dst_, dst.data(), dst.size() * sizeof(int32_t));
        for (int64_t il = 0; il < c.n_layer; ++il) {
            if (!c.has_kv(il) || (c.is_sliding(il) ? gemma4::kSlidingGroup : gemma4::kFullGroup) != g) continue;
            ops::CopyBlocksParams p;
            p.block_bytes = opts_.kv_block_size * pool_row_[sz(il)] * ops::kv_type_bytes(kv_type_);
            p.src = d_copy_src_;
            p.dst = d_copy_dst_;
            p.n = static_cast<int64_t>(src.size());
            p.pool = pools_[sz(il)].k;
            backend_->copy_blocks(p);
            p.pool = pools_[sz(il)].v;
            backend_->copy_blocks(p);
            if (pools_[sz(il)].k_scale != nullptr) {  // and the blocks' row scales
                p.block_bytes = opts_.kv_block_size * c.kv_heads(il) * static_cast<int64_t>(sizeof(float));
                p.pool = pools_[sz(il)].k_scale;
                backend_->copy_blocks(p);
                p.pool = pools_[sz(il)].v_scale;
                backend_->copy_blocks(p);
            }
        }
    }
}

// Copies the micro-batch's tokens, positions, output rows and block tables into
// backend buffers and describes them as a BatchView, with the bound its positions
// stay below (max_keys).
gemma4::BatchView ContextImpl::upload_ubatch(const std::vector<BatchToken>& batch, size_t begin, size_t end) {
    const size_t T = end - begin;
    backend_->wait_uploads();  // the previous micro-batch's copies have read the block
    // The rows at the micro-batch's own pitch, the tables right after them: one copy.
    // A batch shape always gets the same pitch, so a replayed graph's pointers hold.
    step_pitch_ = (T * sizeof(void*) + 15) / 16 * 16;
    int32_t* tokens = step_row<int32_t>(h_step_.get(), kTokens);
    int32_t* pos = step_row<int32_t>(h_step_.get(), kPos);
    int32_t* out_rows = step_row<int32_t>(h_step_.get(), kOutRows);
    int32_t* feed = step_row<int32_t>(h_step_.get(), kFeed);
    const Result& prev = results_[cur_ ^ 1];  // the decode before this one
    bool fed = false;
    std::vector<int32_t> seqs;  // distinct sequences in order of first appearance
    std::vector<int32_t> row_of(sz(opts_.n_seq_max), -1);
    int64_t n_out = 0, max_keys = 0;
    for (size_t i = begin; i < end; ++i) {
        const size_t t = i - begin;
        const int32_t seq = batch[i].seq;
        if (row_of[sz(seq)] < 0) {
            row_of[sz(seq)] = static_cast<int32_t>(seqs.size());
            seqs.push_back(seq);
        }
        const bool from_prev = batch[i].token == kPreviousArgmax;  // checked by validate()
        fed = fed || from_prev;
        tokens[t] = from_prev ? 0 : batch[i].token;
        feed[t] = from_prev ? prev.feed_row[sz(seq)] : -1;
        pos[t] = batch[i].pos;
        max_keys = std::max<int64_t>(max_keys, int64_t{batch[i].pos} + 1);
        if (batch[i].logits) out_rows[sz(n_out++)] = static_cast<int32_t>(t);
    }
    for (int g = 0; g < 2; ++g) {
        int32_t* table_len = step_row<int32_t>(h_step_.get(), group_row(kTableLen0, g));
        const int32_t** table_ptr = step_row<const int32_t*>(h_step_.get(), group_row(kTablePtr0, g));
        for (size_t r = 0; r < seqs.size(); ++r) {
            const auto& tab = tables_->table(g, seqs[r]);
            HF2Q_ASSERT(static_cast<int64_t>(tab.size()) <= table_width_);
            std::copy(tab.begin(), tab.end(), table_row(h_step_.get(), r, g));
        }
        for (size_t i = begin; i < end; ++i) {
            const size_t t = i - begin;
            const size_t r = sz(row_of[sz(batch[i].seq)]);
            table_ptr[t] = table_row(d_step_, r, g);
            table_len[t] = static_cast<int32_t>(tables_->table(g, batch[i].seq).size());
        }
    }
    const size_t table_bytes = seqs.size() * 2 * sz(table_width_) * sizeof(int32_t);
    backend_->upload_async(d_step_, h_step_.get(), kStepRows * step_pitch_ + table_bytes, 1, 0);
    gemma4::BatchView b;
    for (int g = 0; g < 2; ++g) {
        b.tables[g] = step_row<const int32_t*>(d_step_, group_row(kTablePtr0, g));
        b.table_len[g] = step_row<int32_t>(d_step_, group_row(kTableLen0, g));
    }
    b.n_tokens = static_cast<int64_t>(T);
    b.tokens = step_row<int32_t>(d_step_, kTokens);
    b.pos = step_row<int32_t>(d_step_, kPos);
    b.block_size = opts_.kv_block_size;
    b.out_rows = step_row<int32_t>(d_step_, kOutRows);
    b.n_out = n_out;
    b.max_keys = max_keys;  // sizes the attention work (keys 0 .. max position)
    b.one_token_per_sequence = seqs.size() == T;
    b.feed = fed ? step_row<int32_t>(d_step_, kFeed) : nullptr;
    return b;
}

void ContextImpl::run_ubatch(const std::vector<BatchToken>& batch, size_t begin, size_t end, bool last) {
    std::vector<std::pair<int32_t, int32_t>> counts;
    for (size_t i = begin; i < end; ++i) {
        auto it = std::find_if(counts.begin(), counts.end(), [&](auto& p) { return p.first == batch[i].seq; });
        if (it == counts.end()) counts.push_back({batch[i].seq, 1});
        else ++it->second;
    }
    std::vector<kv::BlockCopy> copies;
    tables_->reserve(counts, copies);
    apply_copies(copies);

    gemma4::BatchView b = upload_ubatch(batch, begin, end);
    const int64_t n_out = b.n_out;
    const uint64_t ticket = forward_->run(b, layer_kv_, output_slots(n_out));
    Result& r = results_[cur_];
    if (r.mode == DecodeOutputs::argmax) {
        r.ticket = ticket;
        r.n_pending = static_cast<int32_t>(n_out);
        if (last) {  // land() waits for them, after the caller may have queued the next decode
            int32_t row = 0;
            for (size_t i = begin; i < end; ++i)
                if (batch[i].logits) r.feed_row[sz(batch[i].seq)] = row++;
        } else {
            land(cur_);  // the next micro-batch reuses the staging buffer
        }
    }
    if (r.mode == DecodeOutputs::top_k) {
        for (int64_t j = 0; j < n_out; ++j) {
            const int32_t st = r.head_status[sz(j)];
            r.top_begin.push_back(r.top.size());
            r.top_status.push_back(st);
            for (int32_t t = 0; t < st; ++t)
                r.top.push_back({r.head_ids[sz(j * r.k + t)], r.head_values[sz(j * r.k + t)]});
        }
    }
    r.n_outputs += static_cast<int32_t>(n_out);
    for (auto [seq, n] : counts) tables_->commit(seq, tables_->seq_length(seq) + n);
}

// Where the forward pass puts this micro-batch's n_out results: the logits after
// those of the decode's earlier micro-batches, or the ids in the decode's staging buffer.
gemma4::HeadOutput ContextImpl::output_slots(int64_t n_out) {
    const Result& r = results_[cur_];
    gemma4::HeadOutput out;
    out.mode = r.mode;
    switch (r.mode) {
        case DecodeOutputs::logits: {
            const int64_t V = n_vocab();
            grow_logits(sz((r.n_outputs + n_out) * V));
            out.logits = logits_ + static_cast<size_t>(r.n_outputs) * sz(V);
            break;
        }
        case DecodeOutputs::argmax:
            HF2Q_ASSERT(n_out <= opts_.n_ubatch);
            for (int32_t*& stage : ids_stage_)  // first argmax decode of this context
                if (!stage) stage = static_cast<int32_t*>(backend_->alloc_host(sz(opts_.n_ubatch) * sizeof(int32_t)));
            out.ids = ids_stage_[cur_];
            break;
        case DecodeOutputs::top_k: {
            Result& w = results_[cur_];
            w.head_ids.resize(sz(n_out * w.k));
            w.head_values.resize(sz(n_out * w.k));
            w.head_status.resize(sz(n_out));
            out.k = w.k;
            out.ids = w.head_ids.data();
            out.values = w.head_values.data();
            out.status = w.head_status.data();
            break;
        }
    }
    return out;
}

// The logits live in the backend's fastest host memory (page-locked for a GPU: the
// copy of 262k logits per token is a visible part of a decode step otherwise).
// Grows keeping the logits of earlier micro-batches of the same decode.
void ContextImpl::grow_logits(size_t floats) {
    if (floats <= logits_cap_) return;
    const size_t cap = std::max(floats, logits_cap_ + logits_cap_ / 2);
    float* p = static_cast<float*>(backend_->alloc_host(cap * sizeof(float)));
    if (logits_) {
        std::memcpy(p, logits_, sz(results_[cur_].n_outputs) * sz(n_vocab()) * sizeof(float));
        backend_->free_host(logits_);
    }
    logits_ = p;
    logits_cap_ = cap;
}

ContextImpl::~ContextImpl() {
    backend_->synchronize();  // no argmax still writes the staging buffers
    if (logits_) backend_->free_host(logits_);
    for (int32_t* stage : ids_stage_)
        if (stage) backend_->free_host(stage);
}

void ContextImpl::decode(const std::vector<BatchToken>& batch, DecodeOutputs outputs, int32_t top_k) {
    if (outputs != DecodeOutputs::logits && outputs != DecodeOutputs::argmax &&
        outputs != DecodeOutputs::top_k)  // cast from an integer
        fail("decode: unknown output kind ", static_cast<int>(outputs));
    if (outputs == DecodeOutputs::top_k && (top_k < 1 || top_k > kMaxTopK))
        fail("decode: top_k ", top_k, " is out of range [1, ", kMaxTopK, "] for DecodeOutputs::top_k");
    if (outputs == DecodeOutputs::top_k && !backend_->has_topk_rows())
        fail("decode: this backend does not return top-k candidates (a CUDA build without HF2Q_CUDA_TOPK); "
             "decode with DecodeOutputs::logits");
    if (outputs != DecodeOutputs::top_k && top_k != 0)
        fail("decode: top_k ", top_k, " given without DecodeOutputs::top_k");
    validate(batch);
    // The full-attention group keeps every block: check the whole batch fits before
    // any micro-batch writes (sliding groups are sized to always fit one).
    std::vector<std::pair<int32_t, int32_t>> counts;
    for (const auto& t : batch) {
        auto it = std::find_if(counts.begin(), counts.end(), [&](auto& p) { return p.first == t.seq; });
        if (it == counts.end()) counts.push_back({t.seq, 1});
        else ++it->second;
    }
    int64_t need = tables_->blocks_needed(gemma4::kFullGroup, counts);
    if (need > tables_->free_blocks(gemma4::kFullGroup))
        fail("KV cache full: the batch needs ", need, " blocks but ", tables_->free_blocks(gemma4::kFullGroup),
             " are free (remove sequences or raise the context size)");
    cur_ ^= 1;  // the previous decode's record stays readable (decodes_back 1)
    Result& r = results_[cur_];
    r = Result{};
    r.mode = outputs;
    r.k = top_k;
    if (outputs == DecodeOutputs::argmax) r.feed_row.assign(sz(opts_.n_seq_max), -1);
    try {
        for (size_t b = 0; b < batch.size(); b += sz(opts_.n_ubatch)) {
            const size_t e = std::min(batch.size(), b + sz(opts_.n_ubatch));
            run_ubatch(batch, b, e, e == batch.size());
        }
    } catch (...) {
        r = Result{};  // nothing of a failed decode is readable or feeds the next one
        throw;
    }
}

const float* ContextImpl::logits(int32_t i) const {
    const Result& r = results_[cur_];
    if (r.mode != DecodeOutputs::logits)
        fail("logits: the last decode returned argmax ids or top-k candidates, not logits (decode with "
             "DecodeOutputs::logits)");
    if (i < 0 || i >= r.n_outputs) fail("logits index ", i, " out of range [0, ", r.n_outputs, ")");
    return logits_ + static_cast<size_t>(i) * sz(n_vocab());
}

void ContextImpl::land(int slot) const {
    Result& r = results_[slot];
    if (r.n_pending == 0) return;
    backend_->wait_fence(r.ticket);
    r.ids.insert(r.ids.end(), ids_stage_[slot], ids_stage_[slot] + r.n_pending);
    r.n_pending = 0;
}

namespace {

// The codes of ops::argmax_rows and topk_rows become the errors the sampler throws for
// the same logits (runtime::argmax, init_candidates_top_k); other values pass.
void check_row_code(const char* what, int32_t code, int32_t i) {
    switch (code) {
        case ops::kArgmaxNaN:
            fail(what, ": the logits of output ", i, " hold a NaN");
        case ops::kArgmaxPosInf:
            fail(what, ": the logits of output ", i, " hold +inf");
        case ops::kArgmaxAllNegInf:
            fail(what, ": every logit of output ", i, " is -inf (all banned)");
        default:
            return;
    }
}

}  // namespace

int32_t ContextImpl::argmax(int32_t i, int32_t decodes_back) const {
    if (decodes_back != 0 && decodes_back != 1)
        fail("argmax: decodes_back must be 0 (the last decode) or 1 (the one before), got ", decodes_back);
    const int slot = decodes_back == 0 ? cur_ : cur_ ^ 1;
    const Result& r = results_[slot];
    const char* which = decodes_back == 0 ? "the last decode" : "the decode before the last";
    if (r.mode != DecodeOutputs::argmax)
        fail("argmax: ", which, " returned logits or nothing, not argmax ids (decode with DecodeOutputs::argmax)");
    if (i < 0 || i >= r.n_outputs) fail("argmax index ", i, " out of range [0, ", r.n_outputs, ") of ", which);
    land(slot);
    const int32_t id = r.ids[sz(i)];
    check_row_code("argmax", id, i);
    HF2Q_ASSERT(id >= 0 && id < n_vocab());
    return id;
}

std::span<const TopLogit> ContextImpl::top_k(int32_t i) const {
    const Result& r = results_[cur_];
    if (r.mode != DecodeOutputs::top_k)
        fail("top_k: the last decode returned logits, argmax ids or nothing, not top-k candidates (decode with "
             "DecodeOutputs::top_k)");
    if (i < 0 || i >= r.n_outputs) fail("top_k index ", i, " out of range [0, ", r.n_outputs, ")");
    const int32_t st = r.top_status[sz(i)];
    check_row_code("top_k", st, i);
    HF2Q_ASSERT(st >= 1 && st <= r.k);
    return {r.top.data() + r.top_begin[sz(i)], static_cast<size_t>(st)};
}

}  // namespace hf2q::runtime

namespace hf2q {

std::unique_ptr<Context> Context::create(const Model& model, const ContextOptions& opts) {
    std::unique_ptr<Context> c(new Context());
    c->impl_ = std::make_unique<runtime::ContextImpl>(model.impl(), opts);
    return c;
}

Context::~Context() = default;
void Context::decode(const std::vector<BatchToken>& batch, DecodeOutputs outputs, int32_t top_k) {
    impl_->decode(batch, outputs, top_k);
}
std::span<const TopLogit> Context::top_k(int32_t i) const { return impl_->top_k(i); }
bool Context::has_top_k() const { return impl_->has_top_k(); }
const float* Context::logits(int32_t i) const { return impl_->logits(i); }
int32_t Context::argmax(int32_t i, int32_t decodes_back) const { return impl_->argmax(i, decodes_back); }
int32_t Context::n_outputs() const { return impl_->n_outputs(); }
int64_t Context::n_vocab() const { return impl_->n_vocab(); }
int32_t Context::seq_length(int32_t seq) const { return impl_->tables().seq_length(seq); }
void Context::seq_remove(int32_t seq) { impl_->tables().remove(seq); }
void Context::seq_truncate(int32_t seq, int32_t pos) { impl_->tables().truncate(seq, pos); }
void Context::seq_fork(int32_t src, int32_t dst) { impl_->tables().fork(src, dst); }
const ContextOptions& Context::options() const { return impl_->options(); }
int64_t Context::kv_capacity_tokens() const { return impl_->kv_capacity_tokens(); }
uint64_t Context::weight_copy_bytes() const { return impl_->weight_copy_bytes(); }
OpProfile Context::op_profile() const { return impl_->op_profile(); }
void Context::reset_op_profile() { impl_->reset_op_profile(); }

}  // namespace hf2q
