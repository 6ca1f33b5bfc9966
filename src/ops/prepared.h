// Prepared matmul inputs. A device backend's small-batch matmul first converts its
// input rows into its own form (the CUDA backend: 8-bit values with a scale per 32,
// as its integer GEMV reads them), one extra kernel per matmul. The op that
// produces those rows can write that form at no cost while it has them in
// registers, so ops that produce matmul inputs take an optional `*_prep` output and
// matmuls an optional `x_prep` input: a buffer of Backend::prepared_bytes(rows, n)
// holding rows × n values in the backend's form.
//
// The contract:
//   - The caller passes a prepared buffer only in batches of at most
//     Backend::prepared_tokens() tokens, and only where prepared_bytes(rows, n) > 0;
//     a backend without a prepared form reports 0 for both and never sees one. The
//     experts' down input (written by the GEGLU after their gate_up) may be prepared
//     in batches of up to Backend::prepared_expert_down_tokens() tokens instead.
//   - A producer given a prepared buffer always fills it (whatever kernel runs).
//   - A matmul's x_prep must be the prepared form of exactly its x rows (the same
//     rows, in order, n = n_in), written after x's last change. The matmul may use
//     it or ignore it; either way the result is the same, bit for bit.
//
// BF16 rows, the same idea for larger batches: a device backend's matmul of more
// tokens converts its input rows to BF16 for a tensor-core GEMM (the CUDA backend:
// one conversion kernel per matmul, about 1-2 µs of a 64-sequence decode step's
// critical path each). residual_norms (y_bf16), GEGLU (out_bf16) and attention
// (AttentionParams::out_bf16) may write their outputs' rows in BF16 as well, and
// matmul / matmul_multi (x_bf16) and the router product (MoeRouteParams::router_x_bf16)
// may read them:
//   - The caller passes them only in batches for which Backend::reads_bf16_rows(
//     n_tokens) is true; a backend that never reports true never sees one.
//   - A BF16 row buffer holds rows × n values, row after row (no stride), each the
//     f32 value rounded to nearest even; its producer always fills it.
//   - A matmul's x_bf16 must be exactly its x rows in BF16 (n = n_in), written
//     after x's last change. The matmul may use them or convert x itself; either
//     way the result is the same, bit for bit.
#pragma once
