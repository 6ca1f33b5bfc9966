// A kernel timeline of any CUDA program, graphs included, for finding where a decode
// step's time goes. Nsight Compute serialises kernels and flushes caches, so its
// durations miss what decode is made of: programmatic dependent launches that overlap
// their predecessors and two concurrent chains inside one graph. CUPTI's activity
// records carry every kernel's start and end as it ran in the graph, which is what
// scripts/trace_summary.py turns into each kernel's share of the critical path.
//
// Loaded by the CUDA driver as an injection library (its documented mechanism, so
// hf2q itself links nothing of it):
//   CUDA_INJECTION64_PATH=build/lib/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=trace.csv
//       hf2q bench -m model.gguf --backend cuda -p '' -n 32 -b 1 -r 1
//   python3 scripts/trace_summary.py trace.csv
// One CSV line a kernel: start_ns,end_ns,stream,graph,node,grid,block,regs,name. The
// host's turn between steps is in the same file: a line for each runtime call that
// starts or waits for device work (graph launches, copies, synchronisations), with grid
// "api", the CPU thread in the stream column and the call's name ("api:cudaGraphLaunch"),
// on the same clock as the kernels.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = 8u << 20;

std::mutex g_mutex;
FILE* g_out = nullptr;
size_t g_dropped = 0;

void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    const char* msg = nullptr;
    cuptiGetResultString(r, &msg);
    std::fprintf(stderr, "hf2q_cupti_trace: %s failed: %s\n", what, msg ? msg : "?");
}

// The demangled kernel name without its parameter list (template arguments kept:
// they tell a GEMV's weight type and shape apart); commas replaced, for the CSV.
std::string kernel_name(const char* mangled) {
    if (!mangled) return "?";
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    std::free(d);
    for (const std::string anon = "(anonymous namespace)::"; ;) {  // its '(' is not the parameters'
        const size_t at = s.find(anon);
        if (at == std::string::npos) break;
        s.erase(at, anon.size());
    }
    int depth = 0;
    for (size_t i = 0; i < s.size(); ++i) {  // cut at the '(' that opens the parameters
        if (s[i] == '<') ++depth;
        if (s[i] == '>') --depth;
        if (s[i] == '(' && depth == 0 && i > 0) {
            s.resize(i);
            break;
        }
    }
    for (char& c : s)
        if (c == ',') c = ';';
    return s;
}

// The runtime calls worth a line: the ones scripts/trace_summary.py reads (graph
// launches, copies, waits). The rest (eager kernel launches, attribute queries, event
// records) would only grow the file.
bool interesting_call(const char* name) {
    static const char* const kPrefixes[] = {"cudaGraphLaunch", "cudaMemcpy", "cudaStreamSynchronize",
                                            "cudaEventSynchronize", "cudaDeviceSynchronize"};
    for (const char* p : kPrefixes)
        if (std::strncmp(name, p, std::strlen(p)) == 0) return true;
    return false;
}

// "cudaGraphLaunch_v10000" -> "cudaGraphLaunch".
std::string call_name(CUpti_CallbackId cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || !name) return {};
    std::string s = name;
    const size_t v = s.rfind("_v");
    if (v != std::string::npos && v > 0) s.resize(v);
    return s;
}

void write_api(const CUpti_ActivityAPI* a) {
    const std::string name = call_name(a->cbid);
    if (name.empty() || !interesting_call(name.c_str()) || !g_out) return;
    std::fprintf(g_out, "%llu,%llu,%u,0,0,api,0,0,api:%s\n", (unsigned long long)a->start, (unsigned long long)a->end,
                 a->threadId, name.c_str());
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = kBufferBytes;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(g_mutex);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            write_api(reinterpret_cast<const CUpti_ActivityAPI*>(rec));
            continue;
        }
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        if (g_out)
            std::fprintf(g_out, "%llu,%llu,%u,%u,%llu,%dx%dx%d,%d,%u,%s\n", (unsigned long long)k->start,
                         (unsigned long long)k->end, k->streamId, k->graphId, (unsigned long long)k->graphNodeId,
                         k->gridX, k->gridY, k->gridZ, k->blockX * k->blockY * k->blockZ, k->registersPerThread,
                         kernel_name(k->name).c_str());
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    std::free(buffer);
}

void finish() {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_dropped) std::fprintf(stderr, "hf2q_cupti_trace: %zu records dropped\n", g_dropped);
    if (g_out) std::fclose(g_out);
    g_out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
    const char* path = std::getenv("HF2Q_TRACE_OUT");
    g_out = std::fopen(path && *path ? path : "hf2q_trace.csv", "w");
    if (!g_out) {
        std::perror("hf2q_cupti_trace: cannot open the output file (HF2Q_TRACE_OUT)");
        return 0;
    }
    std::fprintf(g_out, "start_ns,end_ns,stream,graph,node,grid,block,regs,name\n");
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "cuptiActivityEnable (runtime calls)");
    std::atexit(finish);
    return 1;
}
