// hf2q convert: Hugging Face Gemma 4 directory -> GGUF (unquantized types).
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "convert/convert.h"
#include "core/error.h"
#include "core/progress.h"

namespace {

int run_convert(const std::vector<std::string>& args) {
    using namespace hf2q;
    convert::ConvertOptions o;
    std::string quant = "f16";
    bool force = false, no_progress = false;
    std::string supported;
    for (const auto& n : convert::supported_file_type_names())
        supported += (supported.empty() ? "" : ", ") + n;

    cli::ArgParser p(
        "convert", "<hf_dir> -o OUT.gguf [--quant TYPE] [options]",
        "Convert a Hugging Face Gemma 4 checkpoint (config.json + safetensors) to GGUF.");
    p.positional("hf_dir", "Hugging Face model directory", &o.input_dir);
    p.option("-o,--output", "FILE", "GGUF file to write", &o.output_path, /*required=*/true);
    p.option("-q,--quant", "TYPE", "output type: " + supported, &quant);
    p.option("-t,--threads", "N", "conversion threads (0 = all cores)", &o.threads);
    p.option("--name", "NAME", "general.name (default: the input directory's name)", &o.model_name);
    p.flag("-f,--force", "replace an existing output file", &force);
    p.flag("--no-progress", "do not draw a progress bar", &no_progress);
    if (!p.parse(args)) return 0;

    auto ft = convert::file_type_from_name(quant);
    if (!ft) fail("unknown --quant type '", quant, "' (supported: ", supported, ")");
    o.out_type = *ft;
    o.overwrite = force;
    o.progress = !no_progress;
    o.log = [](const std::string& m) { std::fprintf(stderr, "hf2q convert: %s\n", m.c_str()); };

    auto r = convert::convert_hf_to_gguf(o);
    std::fprintf(stderr, "hf2q convert: wrote %s: %zu tensors, %s in %.1f s\n",
                 o.output_path.c_str(), r.n_tensors, format_bytes(r.data_bytes).c_str(), r.seconds);
    return 0;
}

}  // namespace

HF2Q_COMMAND(convert, "convert a Hugging Face Gemma 4 checkpoint to GGUF (f32/f16/bf16)",
             run_convert);
