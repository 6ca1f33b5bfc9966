#!/usr/bin/env bash
# Session 46, after s46a/s46c on the same warm machine: main's GPU suites with the CPU backend's
# decode in registers (4ee023b: the CPU reference's bits unchanged, so every GPU-vs-CPU test must
# pass as before): the CUDA ops suite, the model's CUDA, batching, graph and argmax tests, the
# quantized model's CUDA tests and the attention suite.
#   mkdir -p $OUT && OUT=$OUT bash out/s46f.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
more build-gpu test_cuda_ops test_model test_cuda_attention test_quantized_model || exit 1
el built
t ops 150 build-gpu/bin/test_cuda_ops
t model 150 build-gpu/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*'
t qmodel 120 build-gpu/bin/test_quantized_model --gtest_filter='*Cuda*'
before 480 && t attention 110 build-gpu/bin/test_cuda_attention
el done
