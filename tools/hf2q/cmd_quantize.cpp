// hf2q quantize: GGUF -> GGUF with llama-quantize's per-tensor type mixture.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "convert/ftype.h"
#include "convert/quantize_file.h"
#include "core/error.h"
#include "core/progress.h"

namespace {

int run_quantize(const std::vector<std::string>& args) {
    using namespace hf2q;
    quantize::QuantizeOptions o;
    std::string quant = "q4_k_m", out_type, embd_type;
    std::vector<std::string> tensor_types;
    bool no_progress = false;
    std::string ftypes;
    for (const auto& n : ftype::file_type_names()) ftypes += (ftypes.empty() ? "" : ", ") + n;

    cli::ArgParser p("quantize", "IN.gguf OUT.gguf [--quant TYPE] [options]",
                     "Quantize an F32/F16/BF16 GGUF with llama-quantize's per-tensor type rules.");
    p.positional("in.gguf", "input GGUF", &o.input_path);
    p.positional("out.gguf", "output GGUF (never the input)", &o.output_path);
    p.option("-q,--quant", "TYPE", "file type: " + ftypes + " (aliases q3_k, q4_k, q5_k)", &quant);
    p.option("--imatrix", "FILE", "importance matrix (llama.cpp GGUF imatrix format)",
             &o.imatrix_path);
    p.flag("--allow-requantize", "allow input tensors that are already quantized",
           &o.allow_requantize);
    p.flag("--pure", "default type for every tensor (no mixture rules)", &o.plan.pure);
    p.flag("--leave-output-tensor", "do not quantize output.weight", &o.plan.leave_output_tensor);
    p.option("--tensor-type", "REGEX=TYPE",
             "type for tensors whose name matches (repeatable; first match wins)", &tensor_types);
    p.option("--output-tensor-type", "TYPE", "type of output.weight (and of tied embeddings)",
             &out_type);
    p.option("--token-embedding-type", "TYPE", "type of token_embd / per_layer_token_embd",
             &embd_type);
    p.option("-t,--threads", "N", "threads (0 = all cores)", &o.threads);
    p.flag("-f,--force", "replace an existing output file", &o.overwrite);
    p.flag("--no-progress", "do not draw a progress bar", &no_progress);
    if (!p.parse(args)) return 0;

    auto ft = ftype::file_type_from_name(quant);
    if (!ft) fail("unknown --quant type '", quant, "' (supported: ", ftypes, ")");
    o.plan.ftype = *ft;
    for (const auto& s : tensor_types) o.plan.tensor_types.push_back(ftype::parse_type_override(s));
    if (!out_type.empty())
        o.plan.output_tensor_type = ftype::parse_storage_type(out_type, "--output-tensor-type");
    if (!embd_type.empty())
        o.plan.token_embedding_type =
            ftype::parse_storage_type(embd_type, "--token-embedding-type");
    o.progress = !no_progress;

    auto r = quantize::quantize_gguf(o);
    std::fprintf(stderr,
                 "hf2q quantize: wrote %s: %zu tensors (%zu converted), %s -> %s in %.1f s\n",
                 o.output_path.c_str(), r.n_tensors, r.n_requantized,
                 format_bytes(r.in_bytes).c_str(), format_bytes(r.out_bytes).c_str(), r.seconds);
    return 0;
}

}  // namespace

HF2Q_COMMAND(quantize, "quantize a GGUF file with llama-quantize's per-tensor type mixture",
             run_quantize);
