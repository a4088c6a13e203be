//===- Categorical.cpp - hash_bucket, bucketize, one_hot, tokenize --------===//

#include "sluice/ops/kernels/Categorical.h"

#include "Dispatch.h"
#include "sluice/ops/ConfigFile.h"
#include "sluice/ops/Random.h"
#include "sluice/ops/Utf8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

namespace sluice {
namespace kernels {

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

uint64_t hashInt(int64_t v) {
  return mix64(static_cast<uint64_t>(v) + 0x9E3779B97F4A7C15ull);
}

uint64_t hashString(std::string_view s) {
  return hashInt(static_cast<int64_t>(fnv1a64(s)));
}

Expected<Tensor> hashBucket(const Tensor &input, int64_t buckets) {
  if (!input.valid())
    return Status::error("hash_bucket: input tensor is empty");
  if (buckets < 1)
    return Status::error("hash_bucket: buckets must be >= 1, got " +
                         std::to_string(buckets));
  if (isFloat(input.elem()))
    return Status::error("hash_bucket: expects integer or string values, got " +
                         input.type().str() +
                         " (use bucketize for continuous values, or cast)");
  Tensor out = Tensor::empty(ElemType::I64, input.shape());
  int64_t *dst = out.mutableData<int64_t>();
  int64_t n = input.numElements();
  uint64_t b = static_cast<uint64_t>(buckets);
  if (!input.isNumeric()) {
    const auto &s = input.stringValues();
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<int64_t>(hashString(s[i]) % b);
    return out;
  }
  detail::visitNumeric(input.elem(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!detail::isFloatStorage<T>()) {
      const T *src = reinterpret_cast<const T *>(input.raw());
      for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<int64_t>(hashInt(detail::widen(src[i])) % b);
    }
  });
  return out;
}

Expected<Tensor> bucketize(const Tensor &input,
                           const std::vector<double> &boundaries) {
  if (!input.valid() || !input.isNumeric())
    return Status::error("bucketize: expects a numeric field, got " +
                         (input.valid() ? input.type().str() : "nothing"));
  for (size_t i = 0; i < boundaries.size(); ++i) {
    if (std::isnan(boundaries[i]))
      return Status::error("bucketize: boundary " + std::to_string(i) +
                           " is NaN");
    if (i > 0 && boundaries[i] < boundaries[i - 1])
      return Status::error("bucketize: boundaries must be sorted ascending; " +
                           std::to_string(boundaries[i]) + " at position " +
                           std::to_string(i) + " follows " +
                           std::to_string(boundaries[i - 1]));
  }
  Tensor out = Tensor::empty(ElemType::I32, input.shape());
  int32_t *dst = out.mutableData<int32_t>();
  int64_t n = input.numElements();
  const double *bBegin = boundaries.data();
  const double *bEnd = bBegin + boundaries.size();
  int32_t nb = static_cast<int32_t>(boundaries.size());
  bool exactInts = input.elem() == ElemType::I64;
  for (int64_t i = 0; i < n; ++i) {
    if (exactInts) {
      // Compare int64 exactly: doubles above 2^53 would merge neighbours.
      int64_t v = input.data<int64_t>()[i];
      dst[i] = static_cast<int32_t>(
          std::upper_bound(bBegin, bEnd, v,
                           [](int64_t a, double b) {
                             // a < b, exactly for all int64 and doubles.
                             if (b >= 0x1p63)
                               return true;
                             if (b < -0x1p63)
                               return false;
                             double fb = std::floor(b);
                             int64_t ib = static_cast<int64_t>(fb);
                             return a < ib || (a == ib && fb < b);
                           }) -
          bBegin);
      continue;
    }
    double v = loadAsDouble(input.elem(), input.raw(), size_t(i));
    if (std::isnan(v)) {
      dst[i] = nb;
      continue;
    }
    dst[i] = static_cast<int32_t>(std::upper_bound(bBegin, bEnd, v) - bBegin);
  }
  return out;
}

Expected<Tensor> oneHot(const Tensor &input, int64_t depth, ElemType out) {
  if (!input.valid() || !isInteger(input.elem()))
    return Status::error("one_hot: expects integer ids, got " +
                         (input.valid() ? input.type().str() : "nothing"));
  if (depth < 1)
    return Status::error("one_hot: depth must be >= 1, got " +
                         std::to_string(depth));
  if (!isNumeric(out))
    return Status::error("one_hot: output type must be numeric");
  std::vector<int64_t> shape = input.shape();
  shape.push_back(depth);
  Tensor result = Tensor::zeros(out, shape);
  int64_t n = input.numElements();
  size_t es = elemTypeSize(out);
  uint8_t one[8] = {};
  storeFromDouble(out, 1.0, one, 0);
  uint8_t *dst = result.mutableRaw();
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = loadAsInt(input.elem(), input.raw(), size_t(i));
    if (id < 0 || id >= depth)
      return Status::error("one_hot: id " + std::to_string(id) +
                           " at position " + std::to_string(i) +
                           " is outside [0, " + std::to_string(depth) +
                           "); raise depth or clamp/hash the ids first");
    std::memcpy(dst + (i * depth + id) * es, one, es);
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Vocab and tokenize
//===----------------------------------------------------------------------===//

void Vocab::buildIndex() {
  size_t cap = 16;
  while (cap < tokens_.size() * 2)
    cap <<= 1;
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const std::string &t = tokens_[id];
    uint64_t h = fnv1a64(t) & mask_;
    while (true) {
      int64_t s = slots_[h];
      if (s == 0) {
        slots_[h] = int64_t(id) + 1;
        break;
      }
      if (tokens_[size_t(s - 1)] == t)
        break; // duplicate: the first id stays
      h = (h + 1) & mask_;
    }
  }
}

int64_t Vocab::lookup(std::string_view token) const {
  uint64_t h = fnv1a64(token) & mask_;
  while (true) {
    int64_t s = slots_[h];
    if (s == 0)
      return -1;
    if (tokens_[size_t(s - 1)] == token)
      return s - 1;
    h = (h + 1) & mask_;
  }
}

std::shared_ptr<const Vocab>
Vocab::fromTokens(std::vector<std::string> tokens) {
  auto v = std::make_shared<Vocab>();
  v->tokens_ = std::move(tokens);
  v->buildIndex();
  return v;
}

Expected<std::shared_ptr<const Vocab>> Vocab::load(const std::string &path) {
  // A vocabulary of a million tokens is a few MiB; the limit only stops a
  // device or a wrong file from being read without end.
  constexpr size_t kMaxVocabBytes = size_t(256) << 20;
  std::string text;
  if (Status s = readConfigFile(path, "a vocabulary", kMaxVocabBytes, text); !s)
    return Status::error("vocabulary file: " + s.message());
  std::vector<std::string> tokens;
  // One token a line, as std::getline splits: a last line without '\n'
  // counts, a final '\n' does not start another.
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos)
      end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    tokens.push_back(std::move(line));
    at = end + 1;
  }
  if (tokens.empty())
    return Status::error(path + ": vocabulary file is empty");
  return fromTokens(std::move(tokens));
}

Expected<std::shared_ptr<const Vocab>> Vocab::shared(const std::string &path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Vocab>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end())
    return it->second;
  Expected<std::shared_ptr<const Vocab>> v = load(path);
  if (v)
    cache.emplace(path, *v);
  return v;
}

Expected<Tensor> tokenize(const Tensor &text, const Vocab &vocab,
                          const TokenizeOptions &options, size_t *replaced) {
  if (!text.valid() || text.isNumeric() || text.rank() != 0)
    return Status::error("tokenize: expects a scalar string, got " +
                         (text.valid() ? text.type().str() : "nothing"));
  if (options.out != ElemType::I32 && options.out != ElemType::I64)
    return Status::error("tokenize: output type must be i32 or i64");
  if (replaced)
    *replaced = 0;
  const std::string *textp = &text.str();
  std::string repaired;
  size_t bad = invalidUtf8At(*textp);
  if (bad != std::string::npos) {
    if (!options.replaceInvalid) {
      char msg[200];
      std::snprintf(msg, sizeof msg,
                    "invalid UTF-8: byte 0x%02x at offset %zu of the text is "
                    "not valid UTF-8; fix the data, or set `encoding: "
                    "replace` on the step (U+FFFD)",
                    static_cast<unsigned char>((*textp)[bad]), bad);
      return Status::error(msg);
    }
    repaired = replaceInvalidUtf8(*textp, replaced);
    textp = &repaired;
  }
  const std::string &s = *textp;
  auto isSpace = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
  };
  // Two passes over the text: count the tokens, then reserve the output
  // (Tensor::empty: in the budget, before it is built) and write the ids
  // straight into it. No list of ids grows with the text first.
  auto forEachToken = [&](auto &&fn) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && isSpace(s[i]))
        ++i;
      size_t start = i;
      while (i < s.size() && !isSpace(s[i]))
        ++i;
      if (i == start)
        break;
      fn(std::string_view(s.data() + start, i - start));
    }
  };
  int64_t count = 0;
  forEachToken([&](std::string_view) { ++count; });
  Tensor out = Tensor::empty(options.out, {count});
  std::string lowered;
  size_t k = 0;
  forEachToken([&](std::string_view tok) {
    if (options.lowercase) {
      lowered.assign(tok);
      for (char &c : lowered)
        if (c >= 'A' && c <= 'Z')
          c = char(c - 'A' + 'a');
      tok = lowered;
    }
    int64_t id = vocab.lookup(tok);
    storeFromInt(options.out, id < 0 ? options.unknownId : id, out.mutableRaw(),
                 k++);
  });
  return out;
}

} // namespace kernels
} // namespace sluice
