// hf2q imatrix: collect an importance matrix by running the model over a
// calibration text, saved in llama.cpp's GGUF imatrix format.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "device_flags.h"
#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "hf2q/engine.h"
#include "runtime/imatrix.h"
#include "runtime/model_impl.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace hf2q::cli {
namespace {

struct ImatrixOptions {
    std::string model, text_file, output = "imatrix.gguf", backend = "cpu";
    int32_t ctx = 512, chunks = -1, threads = 0;
};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read calibration file '", path, "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

int run_imatrix(const std::vector<std::string>& args) {
    ImatrixOptions o;
    ArgParser p("imatrix", "-m MODEL -f TEXT [-o imatrix.gguf] [options]",
                "Run the model over a calibration text in chunks of --ctx tokens (each chunk starts\n"
                "with BOS) and record, for every matmul weight, the mean squared activation of each\n"
                "input column (per expert for MoE). Use the result with convert/quantize --imatrix.");
    p.option("-m,--model", "FILE", "GGUF model (F32/F16/BF16 recommended)", &o.model, true);
    p.option("-f,--file", "FILE", "calibration text", &o.text_file, true);
    p.option("-o,--output", "FILE", "output imatrix GGUF", &o.output);
    p.option("-c,--ctx", "N", "tokens per chunk", &o.ctx);
    p.option("--chunks", "N", "chunks to process (-1: all)", &o.chunks);
    p.option("--backend", "NAME", "cpu or cuda", &o.backend);
    p.option("-t,--threads", "N", "CPU threads (0: all)", &o.threads);
    if (!p.parse(args)) return 0;
    if (o.ctx < 2) fail("--ctx must be at least 2");
    parse_backend(o.backend);  // fails early on a bad name

    auto model = Model::load(o.model);
    tokenizer::Tokenizer tok(tokenizer::load_vocab(model->impl().file()));
    std::vector<tokenizer::TokenId> ids = tok.encode(read_file(o.text_file), false, false);
    int64_t n_chunks = static_cast<int64_t>(ids.size()) / o.ctx;
    if (o.chunks >= 0) n_chunks = std::min<int64_t>(n_chunks, o.chunks);
    if (n_chunks < 1)
        fail("the calibration text has ", ids.size(), " tokens, fewer than one chunk of ", o.ctx,
             " (lower --ctx or give more text)");

    runtime::ImatrixCollector collector(model->impl().config().n_expert);
    ContextOptions co;
    co.backend = parse_backend(o.backend);
    co.n_ctx = o.ctx;
    co.n_ubatch = std::min(o.ctx, 512);
    co.n_threads = o.threads;
    co.matmul_observer = collector.observer();
    auto ctx = Context::create(*model, co);
    for (int64_t c = 0; c < n_chunks; ++c) {
        std::vector<BatchToken> batch;
        for (int32_t i = 0; i < o.ctx; ++i) {
            int32_t id = i == 0 && tok.bos_id() >= 0 ? tok.bos_id() : ids[static_cast<size_t>(c * o.ctx + i)];
            batch.push_back({id, 0, i, i + 1 == o.ctx});
        }
        ctx->seq_remove(0);
        ctx->decode(batch);
        std::fprintf(stderr, "\rimatrix: chunk %lld/%lld", static_cast<long long>(c + 1), static_cast<long long>(n_chunks));
    }
    std::fprintf(stderr, "\n");
    collector.save(o.output, {o.text_file}, static_cast<uint32_t>(n_chunks), static_cast<uint32_t>(o.ctx));
    std::fprintf(stderr, "imatrix: wrote %zu entries to %s\n", collector.entries().size(), o.output.c_str());
    return 0;
}

}  // namespace

HF2Q_COMMAND(imatrix, "collect an importance matrix for quantization", run_imatrix);

}  // namespace hf2q::cli
