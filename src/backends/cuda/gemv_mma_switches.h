// The expert GEMV's build switches that its tests read too (tests/cuda/cuda_ops_test.cpp
// skips what a build leaves out); gemv_mma.cu holds the rest of its switches.
#pragma once

// 1 (default): Q5_0 experts get a lane copy at load (GemvArgs::w_copy, made by
// repack_q50_lanes; gemv_mma.h), which the pairs of units read (MmaPairLanes); 0: no
// copy, the blocks as stored, for the A/B. Why: the down products' Q5_0 ran at 64 % of
// the H200's copy rate where Q8_0's ran at 91 % (docs/performance.md, session 37), and
// a pair of Q5_0 units cost 2 · 67.5 SASS instructions, about a third of them putting
// the fifth bits in place (a multiply and three more operations a fragment word) and
// joining misaligned words (PRMT). The copy holds the same bytes reordered: each
// block's fifth bits transposed, so a lane's 8 come out of one shift and two masks,
// and every piece word-aligned; the sums are the same to the bit. H100, session 58
// (out/s58a.sh, against 0 in the same call): 64 sequences +0.43 % with the int8 cache
// (5,351 -> 5,373, three pairs), +0.41 % fp8, +0.26 % f16; the Q5_0 kernel's share of a
// step's critical path 1,126 -> 1,066 us. It costs the Q5_0 experts' size again in GPU
// memory (the 26B-A4B's down products of 16 layers: 2.8 GB), which --no-expert-copy
// saves.
#ifndef HF2Q_GEMV_MMA_Q50_LANES
#define HF2Q_GEMV_MMA_Q50_LANES 1
#endif
