// The expert GEMV's build switches that its tests read too (tests/cuda/cuda_ops_test.cpp
// skips what a build leaves out); gemv_mma.cu holds the rest of its switches.
#pragma once

// 1: Q5_0 experts get a lane copy at load (GemvArgs::w_copy, made by repack_q50_lanes;
// gemv_mma.h), which the pairs of units read (MmaPairLanes); 0 (default): no copy, the
// blocks as stored. Why: the down products' Q5_0 ran at 64 % of the H200's copy rate
// where Q8_0's ran at 91 % (docs/performance.md, session 37), and a pair of Q5_0 units
// cost 2 · 67.5 SASS instructions, about a third of them putting the fifth bits in place
// (a multiply and three more operations a fragment word) and joining misaligned words
// (PRMT). The copy holds the same bytes reordered: each block's fifth bits transposed,
// so a lane's 8 come out of one shift and two masks, and every piece word-aligned; the
// sums are the same to the bit. Off until a GPU has run and measured it (session 57
// prepared it and found no device; out/s57a.sh is its A/B). It costs the Q5_0 experts'
// size again in GPU memory (the 26B-A4B's down products of 16 layers: about 2.6 GiB).
#ifndef HF2Q_GEMV_MMA_Q50_LANES
#define HF2Q_GEMV_MMA_Q50_LANES 0
#endif
