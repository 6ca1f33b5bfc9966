// The sampling flags shared by `generate` and `chat`, bound to one SamplerParams.
#pragma once

#include "args.h"
#include "runtime/sampling.h"

namespace hf2q::cli {

inline void add_sampling_flags(ArgParser& p, runtime::SamplerParams& s) {
    p.option("--temp", "T", "sampling temperature (0: greedy)", &s.temperature);
    p.option("--top-k", "K", "keep the K most likely tokens (0: off)", &s.top_k);
    p.option("--top-p", "P", "nucleus sampling mass (1: off)", &s.top_p);
    p.option("--min-p", "P", "drop tokens below P x the top probability (0: off)", &s.min_p);
    p.option("--repeat-penalty", "X", "repetition penalty (1: off)", &s.repeat_penalty);
    p.option("--presence-penalty", "X", "presence penalty (0: off)", &s.presence_penalty);
    p.option("--frequency-penalty", "X", "frequency penalty (0: off)", &s.frequency_penalty);
    p.option("--repeat-last-n", "N", "penalty window in tokens (-1: all)", &s.penalty_last_n);
    p.option("-s,--seed", "N", "sampling seed", &s.seed);
}

}  // namespace hf2q::cli
