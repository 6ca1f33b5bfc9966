// CudaBackend: owns the device, a stream, a cuBLAS handle, every allocation, and the
// matmul scratch. Ops enqueue on the stream; download() synchronises.
#include <cstring>
#include <vector>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"
#include "core/progress.h"

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

// cuBLAS workspace given explicitly, so captured GEMMs never allocate.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

class CudaBackend final : public ops::Backend {
public:
    explicit CudaBackend(const CudaOptions& o) {
        int n = device_count();
        if (n == 0) fail("no CUDA device is available (check the driver and CUDA_VISIBLE_DEVICES)");
        if (o.device < 0 || o.device >= n) fail("CUDA device ", o.device, " does not exist (", n, " found)");
        HF2Q_CUDA_CHECK(cudaSetDevice(o.device));
        HF2Q_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        if (!o.workspaces) return;  // a memory holder: no ops run on it
        if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) fail("cannot create a cuBLAS handle");
        if (cublasSetWorkspace(cublas_, alloc(kCublasWorkspaceBytes), kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS)
            fail("cannot set the cuBLAS workspace");
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
        attn_ws_.buf = static_cast<float*>(alloc(kAttentionFloats * sizeof(float)));
        attn_ws_.floats = kAttentionFloats;
        attn_ws_.f32_only = o.precision == MatmulPrecision::f32;
    }
    ~CudaBackend() override {
        cudaStreamSynchronize(stream_);
        for (void* p : allocs_) cudaFree(p);
        if (ws_.x) cudaFree(ws_.x);
        if (cublas_) cublasDestroy(cublas_);
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
                 " missing); use a smaller quant type, context or batch");
        }
        HF2Q_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes + kAllocSlack, stream_));
        allocs_.push_back(p);
        return p;
    }
    void upload(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
        // The source is pageable host memory the caller may reuse right away.
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    void download(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    std::unique_ptr<ops::Graph> capture(const std::function<void()>& body) override {
        HF2Q_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        cudaGraph_t graph = nullptr;
        try {
            body();
        } catch (...) {
            cudaStreamEndCapture(stream_, &graph);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            throw;
        }
        HF2Q_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec = nullptr;
        cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        HF2Q_CUDA_CHECK(e);
        return std::make_unique<CudaGraph>(exec, stream_);
    }
    void reserve_matmul_inputs(int64_t elems) override { ensure_activations(env_, elems); }
    void fill_zero(void* dst, size_t bytes) override { HF2Q_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_)); }
    void synchronize() override { HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
    void* alloc_host(size_t bytes) override {
        void* p = nullptr;
        if (cudaMallocHost(&p, bytes > 0 ? bytes : 1) != cudaSuccess) {
            cudaGetLastError();
            fail("cannot allocate ", format_bytes(bytes), " of page-locked host memory");
        }
        return p;
    }
    void free_host(void* p) override { cudaFreeHost(p); }
    size_t free_memory() const override {
        size_t free_b = 0, total_b = 0;
        HF2Q_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        return free_b;
    }

    void rms_norm(const ops::RmsNormParams& p) override { launch_rms_norm(p, stream_); }
    void residual_norms(const ops::ResidualNormsParams& p) override {
        ops::check_residual_norms(p);
        if (launch_residual_norms(p, stream_)) return;
        Backend::residual_norms(p);
        for (int j = 0; j < p.n_out; ++j)  // a producer given a prepared buffer fills it
            if (p.y_prep[j] != nullptr) launch_quantize_q8(p.y[j], p.n, p.rows, p.n, p.y_prep[j], stream_);
    }
    void attention_inputs(const ops::AttentionInputsParams& p) override {
        ops::check_attention_inputs(p);
        if (!launch_attention_inputs(p, stream_)) Backend::attention_inputs(p);
    }
    int64_t prepared_tokens() const override { return env_.precision == MatmulPrecision::bf16 ? kGemvTokens : 0; }
    size_t prepared_bytes(int64_t rows, int64_t n) const override {
        return rows > 0 && n > 0 && n % 32 == 0 ? q8_workspace_bytes(rows, n) : 0;
    }
    void rope(const ops::RopeParams& p) override { launch_rope(p, stream_); }
    void matmul(const ops::MatmulParams& p) override { launch_matmul(p, env_, stream_); }
    void matmul_multi(const ops::MultiMatmulParams& p) override { launch_matmul_multi(p, env_, stream_); }
    void get_rows(const ops::GetRowsParams& p) override { launch_get_rows(p, stream_); }
    void geglu(const ops::GegluParams& p) override { launch_geglu(p, stream_); }
    void attention(const ops::AttentionParams& p) override { launch_attention(p, attn_ws_, stream_); }
    void moe_route(const ops::MoeRouteParams& p) override { launch_moe_route(p, stream_); }
    void moe_group(const ops::MoeGroupParams& p) override { launch_moe_group(p, stream_); }
    void moe_matmul(const ops::MoeMatmulParams& p) override { launch_moe_matmul(p, env_, stream_); }
    void moe_combine(const ops::MoeCombineParams& p) override { launch_moe_combine(p, stream_); }
    void gather_rows(const ops::GatherRowsParams& p) override { launch_gather_rows(p, stream_); }
    void scatter_add(const ops::ScatterAddParams& p) override { launch_scatter_add(p, stream_); }
    void kv_store(const ops::KvStoreParams& p) override { launch_kv_store(p, stream_); }
    void copy_blocks(const ops::CopyBlocksParams& p) override { launch_copy_blocks(p, stream_); }
    void argmax_rows(const ops::ArgmaxRowsParams& p) override { launch_argmax_rows(p, stream_); }
    void add(const float* a, const float* b, float* y, int64_t n) override { launch_add(a, b, y, n, stream_); }
    void scale(float* x, float s, int64_t n) override { launch_scale(x, s, n, stream_); }
    void mul(const float* a, const float* b, float* y, int64_t n) override { launch_mul(a, b, y, n, stream_); }
    void softcap(float* x, float cap, int64_t n) override { launch_softcap(x, cap, n, stream_); }

private:
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    GemmWorkspace ws_;
    MatmulEnv env_;
    AttentionWorkspace attn_ws_;
    std::vector<void*> allocs_;
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
