// CudaBackend: owns the device, a stream (and a second one for the side chain of
// ops::Backend::begin_side, two more for concurrent batched products), a cuBLAS
// handle (and one per product stream), every allocation, and the matmul scratch.
// Ops enqueue on the stream of the chain being issued; download() synchronises.
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_mma.h"
#include "backends/cuda/kernels.h"
#include "core/checked.h"
#include "core/progress.h"

// 1 (default, -DHF2Q_CUDA_TOPK=ON): the engine takes top-k candidates from the device
// (topk_rows in sampling.cu, DecodeOutputs::top_k); 0: it copies logits and samples on
// the host. Written in session 39 without a GPU and off until its tests passed on the
// H200 (out/s39a.sh: every test, memcheck and racecheck clean); there, 64 sampled
// requests generated 850 tokens/s against 441 on the host path (docs/performance.md).
// Set by src/backends/cuda/CMakeLists.txt.
#ifndef HF2Q_CUDA_TOPK
#define HF2Q_CUDA_TOPK 1
#endif

namespace hf2q::cuda {
namespace {

// Weight rows expanded per tensor-core GEMM: 128 Mi BF16 values (256 MiB; 32
// experts of the 26B-A4B gate_up projection per grouped launch).
constexpr size_t kGemmWeightElems = size_t{128} << 20;
// Weight rows expanded per SGEMM call (reference precision): 32 Mi floats (128 MiB).
constexpr size_t kGemmF32Elems = size_t{32} << 20;
// Activations of the integer GEMV (int8 values plus a scale and a sum per 32):
// 16 MiB holds 512 routed rows of 16k values.
constexpr size_t kQ8Bytes = size_t{16} << 20;
// Split-KV partial results of the attention: 16 Mi floats (64 MiB).
constexpr size_t kAttentionFloats = size_t{16} << 20;

class CudaGraph final : public ops::Graph {
public:
    CudaGraph(cudaGraphExec_t exec, cudaStream_t s) : exec_(exec), stream_(s) {}
    ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
    void launch() override { HF2Q_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

private:
    cudaGraphExec_t exec_;
    cudaStream_t stream_;
};

constexpr size_t kAllocSlack = 16;

// GPU memory a decode-layout copy of a weight must leave free (ops::Backend::decode_layout).
constexpr uint64_t kDecodeLayoutHeadroom = uint64_t{2} << 30;

// cuBLAS workspace given explicitly, so captured GEMMs never allocate.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// 1 (default): batches past the GEMV have their matmul inputs' BF16 rows written by
// residual_norms and GEGLU (reads_bf16_rows, ops/prepared.h), so the BF16 GEMMs
// skip their conversion kernels (at 64 sequences of the 26B-A4B four a layer, 1-2 µs
// each on the critical path; 933 -> 814 kernels a step). H200, against 0 in the same
// calls: 64 sequences 4,883 / 4,887 / 4,871 -> 4,900 / 4,909 / 4,888 tokens/s, 32
// sequences 3,138 -> 3,202 (docs/performance.md, session 34). 0: every BF16 GEMM
// converts its input, for the A/B.
#ifndef HF2Q_BF16_ROWS
#define HF2Q_BF16_ROWS 1
#endif
constexpr bool kBf16Rows = HF2Q_BF16_ROWS != 0;
// The batches whose experts' products take the grouped GEMV on device offsets (the
// forward's kMoeDeviceTokens), the one kernel that reads the prepared form there; above,
// the tile GEMM may run and would ignore it.
constexpr int64_t kMoeDownPreparedTokens = 64;

class CudaBackend final : public ops::Backend {
public:
    explicit CudaBackend(const CudaOptions& o) {
        if (o.tile_gemm_max_tokens > kTileGemmMaxTokens)
            fail("CudaOptions::tile_gemm_max_tokens is ", o.tile_gemm_max_tokens, "; the tile GEMM takes at most ",
                 kTileGemmMaxTokens, " tokens");
        int n = device_count();
        if (n == 0) fail("no CUDA device is available (check the driver and CUDA_VISIBLE_DEVICES)");
        if (o.device < 0 || o.device >= n) fail("CUDA device ", o.device, " does not exist (", n, " found)");
        HF2Q_CUDA_CHECK(cudaSetDevice(o.device));
        HF2Q_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        HF2Q_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
        for (cudaEvent_t& e : fenced_) HF2Q_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        if (!o.workspaces) return;  // a memory holder: no ops run on it
        cublas_ = create_cublas();
        ws_.w = static_cast<__nv_bfloat16*>(alloc(kGemmWeightElems * sizeof(__nv_bfloat16)));
        ws_.w_elems = kGemmWeightElems;
        ws_.f32 = static_cast<float*>(alloc(kGemmF32Elems * sizeof(float)));
        ws_.f32_elems = kGemmF32Elems;
        ws_.ptrs = static_cast<void**>(alloc(3 * kMaxGroup * sizeof(void*)));
        ws_.q8 = static_cast<int8_t*>(alloc(kQ8Bytes));
        ws_.q8_bytes = kQ8Bytes;
        env_.ws = &ws_;
        env_.cublas = cublas_;
        env_.precision = o.precision;
        env_.tile_max_tokens = o.tile_gemm_max_tokens;
        arrived_ = alloc_array<unsigned>(1);
        argmax_ws_.arrived = alloc_array<unsigned>(kArgmaxRows);
        argmax_ws_.n_arrived = kArgmaxRows;
        argmax_ws_.part = alloc_array<uint32_t>(4 * kArgmaxParts);
        argmax_ws_.n_part = kArgmaxParts;
        attn_ws_.buf = static_cast<float*>(alloc(kAttentionFloats * sizeof(float)));
        attn_ws_.floats = kAttentionFloats;
        attn_ws_.f32_only = o.precision == MatmulPrecision::f32;
        if (!o.concurrent_side) return;
        // The side chain (begin_side): its own stream and integer-GEMV scratch; the
        // tensor-core scratch and cuBLAS stay the main chain's (main_for_side()).
        HF2Q_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
        HF2Q_CUDA_CHECK(cudaEventCreateWithFlags(&to_side_, cudaEventDisableTiming));
        HF2Q_CUDA_CHECK(cudaEventCreateWithFlags(&to_main_, cudaEventDisableTiming));
        side_ws_.q8 = static_cast<int8_t*>(alloc(kQ8Bytes));
        side_ws_.q8_bytes = kQ8Bytes;
        side_env_ = env_;
        side_env_.ws = &side_ws_;
        side_arrived_ = alloc_array<unsigned>(1);
        create_fork();
    }
    ~CudaBackend() override {
        cudaStreamSynchronize(stream_);
        if (side_) cudaStreamSynchronize(side_);
        for (void* p : allocs_) cudaFree(p);
        if (ws_.x) cudaFree(ws_.x);
        if (cublas_) cublasDestroy(cublas_);
        if (side_) {
            cudaEventDestroy(to_side_);
            cudaEventDestroy(to_main_);
            cudaStreamDestroy(side_);
        }
        destroy_fork();
        cudaEventDestroy(uploaded_);
        for (cudaEvent_t e : fenced_) cudaEventDestroy(e);
        cudaStreamDestroy(stream_);
    }

    const char* name() const override { return "cuda"; }
    bool host_memory() const override { return false; }

    void* alloc(size_t bytes) override {
        void* p = nullptr;
        // 16 bytes of slack: weight decoding reads whole aligned words, which for
        // rows of odd-sized blocks can reach up to 4 bytes past a tensor's end.
        cudaError_t e = cudaMalloc(&p, bytes + kAllocSlack);
        if (e != cudaSuccess) {
            size_t free_b = 0, total_b = 0;
            cudaGetLastError();
            cudaMemGetInfo(&free_b, &total_b);
            fail("out of GPU memory: allocating ", format_bytes(bytes), " with ", format_bytes(free_b), " free of ",
                 format_bytes(total_b), " (", format_bytes(bytes > free_b ? bytes - free_b : 0),
                 " missing); use a smaller quant type, context or batch, or fewer weight copies (hf2q: --batch-copy off, --no-head-copy, --no-expert-copy)");
        }
        HF2Q_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes + kAllocSlack, stream_));
        allocs_.push_back(p);
        allocated_ += bytes;
        return p;
    }
    // Frees p, the last allocation alloc() made (bytes as asked for).
    void release(void* p, size_t bytes) {
        HF2Q_ASSERT(!allocs_.empty() && allocs_.back() == p);
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
        HF2Q_CUDA_CHECK(cudaFree(p));
        allocs_.pop_back();
        allocated_ -= bytes;
    }
    void upload(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
        // The source is pageable host memory the caller may reuse right away.
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    // Page-locked sources: the copy is a DMA the stream runs in order, so the host
    // need not wait (upload's cudaStreamSynchronize, nine times a decode step, cost
    // 4-6 µs a copy: runtime/context_impl.h).
    void upload_async(void* dst, const void* src, size_t width, size_t rows, size_t pitch) override {
        if (width == 0 || rows == 0) return;
        HF2Q_ASSERT(rows == 1 || pitch >= width);
        if (rows == 1)
            HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, width, cudaMemcpyHostToDevice, stream_));
        else
            HF2Q_CUDA_CHECK(cudaMemcpy2DAsync(dst, pitch, src, pitch, width, rows, cudaMemcpyHostToDevice, stream_));
        HF2Q_CUDA_CHECK(cudaEventRecord(uploaded_, stream_));
        uploads_pending_ = true;
    }
    void wait_uploads() override {
        if (!uploads_pending_) return;
        HF2Q_CUDA_CHECK(cudaEventSynchronize(uploaded_));
        uploads_pending_ = false;
    }
    void download(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        if (side_) HF2Q_CUDA_CHECK(cudaStreamSynchronize(side_));  // an unjoined side chain's results
        HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    // Waits for the side chain through an event rather than on the host.
    uint64_t fence() override {
        if (side_) rejoin_side();
        const uint64_t ticket = ++fences_;
        HF2Q_CUDA_CHECK(cudaEventRecord(fenced_[ticket % kFenceEvents], stream_));
        return ticket;
    }
    // An event recorded again for a later ticket completes after this ticket's work
    // (one stream): waiting on it is later than needed, never too early.
    void wait_fence(uint64_t ticket) override {
        if (ticket == 0) return;
        HF2Q_ASSERT(ticket <= fences_);
        HF2Q_CUDA_CHECK(cudaEventSynchronize(fenced_[ticket % kFenceEvents]));
    }
    std::unique_ptr<ops::Graph> capture(const std::function<void()>& body) override {
        if (side_) rejoin_side();  // a stale chain's events must not enter the capture
        HF2Q_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        cudaGraph_t graph = nullptr;
        try {
            body();
        } catch (...) {
            // A side chain the body left open was part of the abandoned capture (its
            // events with it): nothing of it runs, so nothing is left to join.
            on_side_ = side_pending_ = false;
            cudaStreamEndCapture(stream_, &graph);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            throw;
        }
        // A side chain left open or unjoined would fail the capture (unjoined work).
        HF2Q_ASSERT(!on_side_ && !side_pending_);
        HF2Q_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec = nullptr;
        cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        HF2Q_CUDA_CHECK(e);
        return std::make_unique<CudaGraph>(exec, stream_);
    }
    void reserve_matmul_inputs(int64_t elems) override { ensure_activations(env_, elems); }
    void fill_zero(void* dst, size_t bytes) override { HF2Q_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cur_stream())); }
    void synchronize() override {
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (side_) HF2Q_CUDA_CHECK(cudaStreamSynchronize(side_));
    }
    // Without a side stream (CudaOptions::concurrent_side off) these do nothing and
    // the side chain runs in issue order on the one stream.
    void begin_side() override {
        if (!side_) return;
        rejoin_side();  // one left open by an exception in an eager step
        order_after(side_, stream_, to_side_);
        on_side_ = true;
    }
    void end_side() override {
        if (!side_) return;
        HF2Q_ASSERT(on_side_);
        HF2Q_CUDA_CHECK(cudaEventRecord(to_main_, side_));
        on_side_ = false;
        side_pending_ = true;
    }
    void join_side() override {
        if (!side_) return;
        HF2Q_ASSERT(!on_side_ && side_pending_);
        HF2Q_CUDA_CHECK(cudaStreamWaitEvent(stream_, to_main_, 0));
        side_pending_ = false;
    }
    void* alloc_host(size_t bytes) override {
        void* p = nullptr;
        if (cudaMallocHost(&p, bytes > 0 ? bytes : 1) != cudaSuccess) {
            cudaGetLastError();
            fail("cannot allocate ", format_bytes(bytes), " of page-locked host memory");
        }
        return p;
    }
    void free_host(void* p) override { cudaFreeHost(p); }
    // The device's address of alloc_host memory (the same one under unified addressing).
    template <class T>
    static T* device_view(T* host) {
        void* d = nullptr;
        if (cudaHostGetDevicePointer(&d, host, 0) != cudaSuccess) {
            cudaGetLastError();
            fail("CUDA: host memory at ", static_cast<const void*>(host),
                 " is not mapped for the device (allocate it with alloc_host)");
        }
        return static_cast<T*>(d);
    }
    uint64_t allocated_bytes() const override { return allocated_; }
    size_t free_memory() const override {
        size_t free_b = 0, total_b = 0;
        HF2Q_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        return free_b;
    }
    // Whether a weight copy of `bytes` (none: its size overflowed) leaves
    // kDecodeLayoutHeadroom free for the contexts' workspaces and KV cache.
    bool copy_fits(std::optional<uint64_t> bytes) const {
        const uint64_t free_b = free_memory();
        return bytes && free_b >= kDecodeLayoutHeadroom && *bytes <= free_b - kDecodeLayoutHeadroom;
    }
    // Q6_K: the rows in planes (gemv_q8.cu), read by the one-token GEMV with aligned
    // loads (H200, the 26B-A4B's LM head: 283 -> 221 us). Only where the copy leaves
    // kDecodeLayoutHeadroom free for the contexts' workspaces and KV cache.
    const void* decode_layout(const ops::WeightView& w) override {
        if (w.type != GgmlType::Q6_K || w.n_in <= 0 || w.n_in % 256 != 0 || w.n_out <= 0 || w.empty()) return nullptr;
        const std::optional<uint64_t> bytes = checked_mul(q6k_planes_row_bytes(w.n_in), static_cast<uint64_t>(w.n_out));
        if (!copy_fits(bytes)) return nullptr;
        void* d = alloc(static_cast<size_t>(*bytes));
        launch_repack_q6k_planes(static_cast<const uint8_t*>(w.data), w.row_bytes, static_cast<uint8_t*>(d), w.n_out,
                                 w.n_in, stream_);
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return d;
    }

    // Q4_K experts: the scaled copy (gemv_mma.h) the tensor-core expert GEMV of
    // batched decode reads, 11 % more bytes than the experts (the 26B-A4B's gate_up:
    // about 9.5 GB). Only where it leaves kDecodeLayoutHeadroom free, and not where a
    // scale would overflow f16 (the experts' own blocks then serve).
    const void* expert_layout(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert) override {
        // Q5_0 experts (a build with HF2Q_GEMV_MMA_Q50_LANES): the lane copy (gemv_mma.h),
        // as many bytes as the experts' rows, the same values.
        if (q50_lanes_supported(w, expert_bytes, n_expert))
            return expert_copy(w, n_expert, w.row_bytes, [&](uint8_t* d) {
                repack_q50_lanes(w, expert_bytes, n_expert, d, stream_);
                return true;
            });
        if (!q4k_scaled_supported(w, expert_bytes, n_expert)) return nullptr;
        return expert_copy(w, n_expert, q4k_scaled_row_bytes(w.n_in), [&](uint8_t* d) {
            return repack_q4k_scaled(w, expert_bytes, n_expert, d, stream_);
        });
    }

    // Q4_K dense weights: the tile copy (gemm_tile.cu) batched decode's products of
    // 17-32 tokens (CudaOptions::tile_gemm_max_tokens) read, 0.625 bytes a value. Only
    // where it leaves kDecodeLayoutHeadroom.
    const void* tile_layout(const ops::WeightView& w) override {
        const uint64_t bytes = tile_layout_bytes(w);
        if (bytes == 0 || !copy_fits(bytes)) return nullptr;
        void* d = alloc(static_cast<size_t>(bytes));
        repack_tile_layout(w, static_cast<uint8_t*>(d), stream_);
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return d;
    }

    uint64_t tile_layout_bytes(const ops::WeightView& w) const override {
        return tile_layout_supported(w) ? cuda::tile_layout_bytes(w.n_out, w.n_in) : 0;
    }

    // n_expert experts of w again in rows of row_bytes, written by repack (false: the
    // copy is not to be used), where the copy leaves kDecodeLayoutHeadroom free.
    template <class Repack>
    const void* expert_copy(const ops::WeightView& w, int64_t n_expert, uint64_t row_bytes, Repack repack) {
        const std::optional<uint64_t> rows =
            checked_mul(static_cast<uint64_t>(w.n_out), static_cast<uint64_t>(n_expert));
        const std::optional<uint64_t> bytes = rows ? checked_mul(*rows, row_bytes) : std::nullopt;
        if (!copy_fits(bytes)) return nullptr;
        void* d = alloc(static_cast<size_t>(*bytes));
        if (repack(static_cast<uint8_t*>(d))) return d;
        release(d, static_cast<size_t>(*bytes));
        return nullptr;
    }

    // Every type the expansion decodes except BF16 rows, which gemm_bf16 reads as
    // stored: the BF16 rows it would otherwise write on each call (H200, 26B-A4B: the
    // dense matrices and the LM head, 4.8 GB). Only where the copy leaves
    // kDecodeLayoutHeadroom free.
    uint64_t batch_layout_bytes(const ops::WeightView& w) const override {
        if (w.n_in <= 0 || w.n_out <= 0 || w.empty() || w.n_in > 2147483647 || w.n_out > 2147483647 ||
            bf16_rows_direct(w))
            return 0;
        const std::optional<uint64_t> values = checked_mul(static_cast<uint64_t>(w.n_in), static_cast<uint64_t>(w.n_out));
        const std::optional<uint64_t> bytes = values ? checked_mul(*values, uint64_t{2}) : std::nullopt;
        return bytes ? *bytes : 0;
    }
    const void* batch_layout(const ops::WeightView& w) override {
        const uint64_t bytes = batch_layout_bytes(w);
        if (bytes == 0 || !copy_fits(bytes)) return nullptr;
        auto* d = static_cast<__nv_bfloat16*>(alloc(static_cast<size_t>(bytes)));
        expand_to_bf16(w, d, stream_);
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return d;
    }
    // q, k and v's copies in one allocation, so launch_matmul_multi multiplies them as
    // one matrix (H200, 64 tokens of the 26B-A4B's sliding layers in a graph: 14.8 µs
    // against 21.0 for the three GEMMs on three streams). Any weight without a copy,
    // or a total that overflows or does not fit: one copy each, as batch_layout.
    void batch_layouts(std::span<ops::WeightView* const> ws) override {
        uint64_t total = 0;
        bool joint = !ws.empty();
        for (const ops::WeightView* w : ws) {
            const uint64_t bytes = batch_layout_bytes(*w);
            const std::optional<uint64_t> sum = checked_add(total, bytes);
            joint = joint && bytes > 0 && w->n_in == ws[0]->n_in && sum;
            total = sum.value_or(0);
        }
        if (!joint || !copy_fits(total)) return Backend::batch_layouts(ws);
        auto* d = static_cast<__nv_bfloat16*>(alloc(static_cast<size_t>(total)));
        for (ops::WeightView* w : ws) {
            expand_to_bf16(*w, d, stream_);
            w->batch_layout = d;
            d += static_cast<size_t>(batch_layout_bytes(*w) / 2);
        }
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    void rms_norm(const ops::RmsNormParams& p) override { launch_rms_norm(p, cur_stream()); }
    void residual_norms(const ops::ResidualNormsParams& p) override {
        ops::check_residual_norms(p);
        if (launch_residual_norms(p, cur_stream())) return;
        Backend::residual_norms(p);
        for (int j = 0; j < p.n_out; ++j) {  // a producer given a prepared buffer fills it
            if (p.y_prep[j] != nullptr) launch_quantize_q8(p.y[j], p.n, p.rows, p.n, p.y_prep[j], cur_stream());
            if (p.y_bf16[j] != nullptr) to_bf16_rows(p.y[j], p.n, p.rows, p.n, p.y_bf16[j], cur_stream());
        }
    }
    void attention_inputs(const ops::AttentionInputsParams& p) override {
        ops::check_attention_inputs(p);
        if (!launch_attention_inputs(p, cur_stream())) Backend::attention_inputs(p);
    }
    int64_t prepared_tokens() const override { return env_.precision == MatmulPrecision::bf16 ? kGemvTokens : 0; }
    // Up to kMoeDownPreparedTokens, the GEGLU writes the experts' down input in the 8-bit
    // form and the grouped GEMV skips its quantize_q8 launch (a decode step at 64
    // sequences: 30 of its 60 launches). H100, against kGemvTokens in the same call
    // (out/s49e.sh, session 50), 64 sequences: f16 4,412 / 4,410 -> 4,423 / 4,422, int8
    // 5,249 / 5,243 -> 5,264 / 5,260, fp8 5,293 / 5,293 -> 5,306 / 5,301 tokens/s.
    int64_t prepared_expert_down_tokens() const override {
        return env_.precision == MatmulPrecision::bf16 ? kMoeDownPreparedTokens : prepared_tokens();
    }
    size_t prepared_bytes(int64_t rows, int64_t n) const override {
        return rows > 0 && n > 0 && n % 32 == 0 ? q8_workspace_bytes(rows, n) : 0;
    }
    // The BF16 GEMMs of batches past the GEMV read their inputs' BF16 rows
    // (ops/prepared.h) instead of converting them (kBf16Rows).
    bool reads_bf16_rows(int64_t n_tokens) const override {
        return kBf16Rows && env_.precision == MatmulPrecision::bf16 && !matmul_uses_gemv(n_tokens);
    }
    void rope(const ops::RopeParams& p) override { launch_rope(p, cur_stream()); }
    void matmul(const ops::MatmulParams& p) override {
        if (matmul_uses_gemv(p.n_tokens)) return launch_matmul(p, env(), cur_stream());
        main_for_side([&](cudaStream_t st, MatmulEnv& e) { launch_matmul(p, e, st); });
    }
    void matmul_multi(const ops::MultiMatmulParams& p) override {
        if (matmul_uses_gemv(p.n_tokens)) return launch_matmul_multi(p, env(), cur_stream());
        main_for_side([&](cudaStream_t st, MatmulEnv& e) { launch_matmul_multi(p, e, st); });
    }
    void get_rows(const ops::GetRowsParams& p) override { launch_get_rows(p, cur_stream()); }
    void geglu(const ops::GegluParams& p) override { launch_geglu(p, cur_stream()); }
    void attention(const ops::AttentionParams& p) override {
        main_for_side([&](cudaStream_t st, MatmulEnv&) { launch_attention(p, attn_ws_, st); });
    }
    void moe_route(const ops::MoeRouteParams& p) override { launch_moe_route(p, cur_stream()); }
    void moe_group(const ops::MoeGroupParams& p) override { launch_moe_group(p, cur_stream()); }
    void moe_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g) override {
        ops::check_moe_route_group(r, g);
        if (r.router_x != nullptr) {
            if (launch_moe_router_route_group(r, g, on_side_ ? side_arrived_ : arrived_, cur_stream())) return;
            matmul(ops::router_product(r));  // dispatched as the matmul op
        }
        launch_moe_route_group(ops::routing_of(r), g, cur_stream());
    }
    void moe_matmul(const ops::MoeMatmulParams& p) override {
        if (!moe_matmul_uses_gemm(p, env())) return launch_moe_matmul(p, env(), cur_stream());
        main_for_side([&](cudaStream_t st, MatmulEnv& e) { launch_moe_matmul(p, e, st); });
    }
    void moe_combine(const ops::MoeCombineParams& p) override { launch_moe_combine(p, cur_stream()); }
    void gather_rows(const ops::GatherRowsParams& p) override { launch_gather_rows(p, cur_stream()); }
    void scatter_add(const ops::ScatterAddParams& p) override { launch_scatter_add(p, cur_stream()); }
    void kv_store(const ops::KvStoreParams& p) override { launch_kv_store(p, cur_stream()); }
    void copy_blocks(const ops::CopyBlocksParams& p) override { launch_copy_blocks(p, cur_stream()); }
    void feed_tokens(const ops::FeedTokensParams& p) override { launch_feed_tokens(p, cur_stream()); }
    void argmax_rows(const ops::ArgmaxRowsParams& p) override {
        ops::ArgmaxRowsParams q = p;
        if (q.host_out) q.host_out = device_view(q.host_out);
        launch_argmax_rows(q, on_side_ ? ArgmaxWorkspace{} : argmax_ws_, cur_stream());
    }
    void topk_rows(const ops::TopkRowsParams& p) override { launch_topk_rows(p, cur_stream()); }
    bool has_topk_rows() const override { return HF2Q_CUDA_TOPK != 0; }
    size_t topk_rows_scratch_bytes(int64_t rows, int64_t n) const override {
        return cuda::topk_rows_scratch_bytes(rows, n);
    }
    void add(const float* a, const float* b, float* y, int64_t n) override { launch_add(a, b, y, n, cur_stream()); }
    void scale(float* x, float s, int64_t n) override { launch_scale(x, s, n, cur_stream()); }
    void mul(const float* a, const float* b, float* y, int64_t n) override { launch_mul(a, b, y, n, cur_stream()); }
    void softcap(float* x, float cap, int64_t n) override { launch_softcap(x, cap, n, cur_stream()); }

private:
    // The stream and matmul scratch of the chain ops are being issued to.
    cudaStream_t cur_stream() const { return on_side_ ? side_ : stream_; }
    MatmulEnv& env() { return on_side_ ? side_env_ : env_; }
    // Later work on `waiter` waits for the work issued so far on `done` (through ev).
    static void order_after(cudaStream_t waiter, cudaStream_t done, cudaEvent_t ev) {
        HF2Q_CUDA_CHECK(cudaEventRecord(ev, done));
        HF2Q_CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
    }

    // A cuBLAS handle with a workspace of its own, given explicitly so captured GEMMs
    // never allocate (kCublasWorkspaceBytes).
    cublasHandle_t create_cublas() {
        cublasHandle_t h = nullptr;
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail("cannot create a cuBLAS handle");
        if (cublasSetWorkspace(h, alloc(kCublasWorkspaceBytes), kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(h);
            fail("cannot set the cuBLAS workspace");
        }
        return h;
    }

    // The streams of concurrent batched products (MatmulFork, matmul.cu); the
    // tensor-core path only (the reference precision's SGEMMs share one f32 scratch).
    // Each handle gets a workspace of the main one's size, so cuBLAS picks the same
    // algorithms.
    void create_fork() {
        if (env_.precision != MatmulPrecision::bf16) return;
        for (int i = 0; i < MatmulFork::kStreams; ++i) {
            HF2Q_CUDA_CHECK(cudaStreamCreateWithFlags(&fork_.stream[i], cudaStreamNonBlocking));
            HF2Q_CUDA_CHECK(cudaEventCreateWithFlags(&fork_.done[i], cudaEventDisableTiming));
            fork_.cublas[i] = create_cublas();
        }
        HF2Q_CUDA_CHECK(cudaEventCreateWithFlags(&fork_.start, cudaEventDisableTiming));
        env_.fork = &fork_;
    }
    void destroy_fork() {
        for (int i = 0; i < MatmulFork::kStreams; ++i) {
            if (fork_.stream[i]) cudaStreamSynchronize(fork_.stream[i]);
            if (fork_.cublas[i]) cublasDestroy(fork_.cublas[i]);
            if (fork_.done[i]) cudaEventDestroy(fork_.done[i]);
            if (fork_.stream[i]) cudaStreamDestroy(fork_.stream[i]);
        }
        if (fork_.start) cudaEventDestroy(fork_.start);
    }

    // Closes and joins a side chain that an exception left open between begin_side()
    // and join_side() (outside a capture), so later ops keep the stream order.
    void rejoin_side() {
        if (on_side_) end_side();
        if (side_pending_) join_side();
    }

    // Runs f(stream, env) for an op that needs the main chain's scratch (attention's
    // split buffer, the tensor-core paths' expanded weights, cuBLAS): issued inside
    // a side chain, it runs on the main stream, after the side chain's earlier ops
    // and before its later ones. The main chain has no concurrent ops yet (they are
    // issued after end_side()), so nothing else uses that scratch meanwhile.
    template <class F>
    void main_for_side(F&& f) {
        if (!on_side_) return f(stream_, env_);
        order_after(stream_, side_, to_main_);
        f(stream_, env_);
        order_after(side_, stream_, to_side_);
    }

    cudaStream_t stream_ = nullptr;
    cudaEvent_t uploaded_ = nullptr;  // recorded after each upload_async
    bool uploads_pending_ = false;    // an upload_async since the last wait_uploads
    // fence()'s tickets count from 1; ticket t recorded fenced_[t % 4] (two decodes'
    // ids are awaited at most: runtime/context_impl.h).
    static constexpr uint64_t kFenceEvents = 4;
    cudaEvent_t fenced_[kFenceEvents] = {};
    uint64_t fences_ = 0;
    cublasHandle_t cublas_ = nullptr;
    GemmWorkspace ws_;
    MatmulEnv env_;
    AttentionWorkspace attn_ws_;
    // The side chain (ops::Backend::begin_side): null without concurrent_side.
    cudaStream_t side_ = nullptr;
    cudaEvent_t to_side_ = nullptr, to_main_ = nullptr;  // main -> side, side -> main
    GemmWorkspace side_ws_;                              // its integer-GEMV scratch only
    MatmulEnv side_env_;
    MatmulFork fork_;  // env_.fork, with the side chain (create_fork)
    bool on_side_ = false;       // between begin_side() and end_side()
    bool side_pending_ = false;  // between end_side() and join_side()
    // The fused router kernel's block counters (launch_moe_router_route_group), one
    // per stream so concurrent chains never share one; zeroed by alloc().
    unsigned* arrived_ = nullptr;
    unsigned* side_arrived_ = nullptr;
    // The split argmax's counters and partial bests (main stream only; 16 KiB + 64 KiB).
    static constexpr int64_t kArgmaxRows = 4096, kArgmaxParts = 4096;
    ArgmaxWorkspace argmax_ws_;
    std::vector<void*> allocs_;
    uint64_t allocated_ = 0;
};

}  // namespace

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

bool use_wgmma() {
#if HF2Q_WGMMA
    static const bool yes = [] {
        int dev = 0, major = 0;
        HF2Q_CUDA_CHECK(cudaGetDevice(&dev));
        HF2Q_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        return major == 9;
    }();
    return yes;
#else
    return false;
#endif
}

std::unique_ptr<ops::Backend> make_backend(const CudaOptions& opts) { return std::make_unique<CudaBackend>(opts); }

}  // namespace hf2q::cuda
