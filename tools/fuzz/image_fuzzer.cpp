//===- image_fuzzer.cpp - libFuzzer target for JPEG/PNG decoding ----------===//
//
// Image bytes come straight from data sets: every input must decode or give
// an error (truncated, corrupt, too large for the budget), for each channel
// count; so must the fused decode + crop, whose window decode parses the
// JPEG's markers itself to cut out restart intervals, for a box that the
// input's last bytes choose.
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
  if (size < 8)
    return 0;
  const uint8_t *b = data + size - 4;
  kernels::CropBox box{b[0] % 64, b[1] % 64, 1 + b[2] % 64, 1 + b[3] % 64};
  for (int channels : {1, 3}) {
    Expected<Tensor> c = kernels::decodeImageCrop(bytes, channels, box);
    if (!c && c.status().message().empty())
      std::abort();
  }
  return 0;
}
