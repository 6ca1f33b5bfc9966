// hf2q synth: write a synthetic Gemma 4 GGUF (real shapes and metadata, random weights).
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "convert/ftype.h"
#include "convert/synth.h"
#include "core/error.h"
#include "core/progress.h"

namespace {

int run_synth(const std::vector<std::string>& args) {
    using namespace hf2q;
    synth::SynthOptions o;
    std::string quant = "q4_k_m";
    bool no_progress = false;
    std::string presets, ftypes;
    for (const auto& n : synth::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
    for (const auto& n : ftype::file_type_names()) ftypes += (ftypes.empty() ? "" : ", ") + n;

    cli::ArgParser p("synth", "--preset NAME -o OUT.gguf [--quant TYPE] [--seed N] [options]",
                     "Write a Gemma 4 GGUF with the real model's shapes and metadata and random, "
                     "deterministic weights, typed as llama-quantize types them.");
    p.option("--preset", "NAME", "model: " + presets, &o.preset, /*required=*/true);
    p.option("-o,--output", "FILE", "GGUF file to write", &o.output_path, /*required=*/true);
    p.option("-q,--quant", "TYPE", "file type: " + ftypes + " (aliases q3_k, q4_k, q5_k)", &quant);
    p.option("--seed", "N", "random seed", &o.seed);
    p.option("--vocab-from", "FILE",
             "copy tokenizer.* keys (and the vocabulary size) from this GGUF", &o.vocab_from);
    p.option("-t,--threads", "N", "threads (0 = all cores)", &o.threads);
    p.flag("--fast",
           "for benchmarks: build each big matrix from " + std::to_string(synth::kFastPoolRows) +
               " quantized rows in a seeded order (same tensors, types and sizes; F32 tensors exact)",
           &o.fast);
    p.flag("-f,--force", "replace an existing output file", &o.overwrite);
    p.flag("--no-progress", "do not draw a progress bar", &no_progress);
    if (!p.parse(args)) return 0;

    auto ft = ftype::file_type_from_name(quant);
    if (!ft) fail("unknown --quant type '", quant, "' (supported: ", ftypes, ")");
    o.ftype = *ft;
    o.progress = !no_progress;
    auto r = synth::synth_model(o);
    std::fprintf(stderr,
                 "hf2q synth: wrote %s: %zu tensors, %.3f B parameters, %s in %.1f s (%.1f MB/s)\n",
                 o.output_path.c_str(), r.n_tensors, static_cast<double>(r.n_params) / 1e9,
                 format_bytes(r.data_bytes).c_str(), r.seconds,
                 r.seconds > 0 ? static_cast<double>(r.data_bytes) / 1e6 / r.seconds : 0.0);
    return 0;
}

}  // namespace

HF2Q_COMMAND(
    synth, "write a synthetic Gemma 4 GGUF (real shapes, random weights) for tests and benchmarks",
    run_synth);
