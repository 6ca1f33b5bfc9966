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
//     a backend without a prepared form reports 0 for both and never sees one.
//   - A producer given a prepared buffer always fills it (whatever kernel runs).
//   - A matmul's x_prep must be the prepared form of exactly its x rows (the same
//     rows, in order, n = n_in), written after x's last change. The matmul may use
//     it or ignore it; either way the result is the same, bit for bit.
#pragma once
