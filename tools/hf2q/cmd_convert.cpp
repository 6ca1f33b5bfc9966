// hf2q convert: Hugging Face Gemma 4 directory -> GGUF.
//
// Float types are written directly. Quantized types run llama.cpp's own pipeline:
// convert to an F16 (or --intermediate) GGUF next to the output, then quantize it
// with llama-quantize's per-tensor rules, so the bytes equal
// `convert_hf_to_gguf.py --outtype f16` followed by `llama-quantize`.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "convert/convert.h"
#include "convert/ftype.h"
#include "convert/quantize_file.h"
#include "core/error.h"
#include "core/progress.h"

namespace {

int run_convert(const std::vector<std::string>& args) {
    using namespace hf2q;
    convert::ConvertOptions o;
    std::string quant = "f16", intermediate = "f16", imatrix;
    bool force = false, no_progress = false;
    std::string supported;
    for (const auto& n : ftype::file_type_names()) supported += (supported.empty() ? "" : ", ") + n;

    cli::ArgParser p(
        "convert", "<hf_dir> -o OUT.gguf [--quant TYPE] [options]",
        "Convert a Hugging Face Gemma 4 checkpoint (config.json + safetensors) to GGUF.");
    p.positional("hf_dir", "Hugging Face model directory", &o.input_dir);
    p.option("-o,--output", "FILE", "GGUF file to write", &o.output_path, /*required=*/true);
    p.option("-q,--quant", "TYPE", "output type: " + supported, &quant);
    p.option("--imatrix", "FILE", "importance matrix (llama.cpp GGUF imatrix) for quantized types", &imatrix);
    p.option("--intermediate", "TYPE", "float type converted to before quantizing (f16, bf16, f32)", &intermediate);
    p.option("-t,--threads", "N", "conversion threads (0 = all cores)", &o.threads);
    p.option("--name", "NAME", "general.name (default: the input directory's name)", &o.model_name);
    p.flag("-f,--force", "replace an existing output file", &force);
    p.flag("--no-progress", "do not draw a progress bar", &no_progress);
    if (!p.parse(args)) return 0;

    auto ft = ftype::file_type_from_name(quant);
    if (!ft) fail("unknown --quant type '", quant, "' (supported: ", supported, ")");
    o.overwrite = force;
    o.progress = !no_progress;
    o.log = [](const std::string& m) { std::fprintf(stderr, "hf2q convert: %s\n", m.c_str()); };

    if (auto direct = convert::file_type_from_name(quant)) {
        if (!imatrix.empty()) fail("--imatrix applies to quantized types only, not ", quant);
        o.out_type = *direct;
        auto r = convert::convert_hf_to_gguf(o);
        std::fprintf(stderr, "hf2q convert: wrote %s: %zu tensors, %s in %.1f s\n", o.output_path.c_str(),
                     r.n_tensors, format_bytes(r.data_bytes).c_str(), r.seconds);
        return 0;
    }
    auto mid = convert::file_type_from_name(intermediate);
    if (!mid) fail("--intermediate must be f16, bf16 or f32, got '", intermediate, "'");
    namespace fs = std::filesystem;
    if (fs::exists(o.output_path) && !force)
        fail("output file '", o.output_path, "' exists (use --force to replace it)");
    const std::string final_path = o.output_path;
    const std::string tmp = final_path + ".convert-" + std::to_string(::getpid()) + ".gguf";
    struct Cleanup {
        std::string path;
        ~Cleanup() {
            std::error_code ec;
            fs::remove(path, ec);
        }
    } cleanup{tmp};
    o.out_type = *mid;
    o.output_path = tmp;
    o.overwrite = true;
    convert::convert_hf_to_gguf(o);

    quantize::QuantizeOptions q;
    q.input_path = tmp;
    q.output_path = final_path;
    q.plan.ftype = *ft;
    q.imatrix_path = imatrix;
    q.overwrite = force;
    q.threads = o.threads;
    q.progress = !no_progress;
    auto r = quantize::quantize_gguf(q);
    std::fprintf(stderr, "hf2q convert: wrote %s (%s): %zu tensors, %s in %.1f s\n", final_path.c_str(),
                 std::string(ftype::file_type_name(*ft)).c_str(), r.n_tensors, format_bytes(r.out_bytes).c_str(),
                 r.seconds);
    return 0;
}

}  // namespace

HF2Q_COMMAND(convert, "convert a Hugging Face Gemma 4 checkpoint to GGUF (float or quantized types)",
             run_convert);
