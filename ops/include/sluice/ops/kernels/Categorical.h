//===- Categorical.h - hash_bucket, bucketize, one_hot, tokenize -*- C++
//-*-===//
//
// Kernels that turn raw values into ids. Hashes are specified bit for bit
// (below) so bucket ids are stable across platforms, compilers and releases:
// a model trained on bucket ids must see the same ids at serving time.
//
//   hashInt(v)    = SplitMix64's first output for seed v:
//                   mix64(uint64(v) + 0x9E3779B97F4A7C15), mix64 as in
//                   Random.h (Steele/Lea/Flood; Vigna's splitmix64.c).
//                   Integers of every width are sign-extended to int64 first,
//                   so i32 -5 and i64 -5 hash alike.
//   hashString(s) = hashInt(FNV-1a-64(bytes of s)) (FNV offset basis
//                   0xCBF29CE484222325, prime 0x100000001B3). FNV-1a alone
//                   has weak low bits, which a modulo by a power of two would
//                   expose; the SplitMix finalizer fixes that.
//   bucket        = hash % buckets (unsigned 64-bit modulo), as i64.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_CATEGORICAL_H
#define SLUICE_OPS_KERNELS_CATEGORICAL_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {
namespace kernels {

/// FNV-1a, 64-bit.
uint64_t fnv1a64(std::string_view bytes);
/// See the file comment.
uint64_t hashInt(int64_t v);
uint64_t hashString(std::string_view s);

/// i64 tensor of the input's shape: bucket of each element. Input: any
/// integer or bool type, Bytes or String. Floats are refused (bucketize
/// them instead). buckets >= 1.
Expected<Tensor> hashBucket(const Tensor &input, int64_t buckets);

/// i32 tensor of the input's shape: the number of boundaries <= x, i.e.
/// numpy.digitize(x, boundaries, right=False) for increasing boundaries.
/// NaN maps to boundaries.size() (numpy sorts NaN last). Boundaries must be
/// non-decreasing and not NaN.
Expected<Tensor> bucketize(const Tensor &input,
                           const std::vector<double> &boundaries);

/// Input shape + [depth] of type `out` with 1 at the index of each element.
/// Indices must lie in [0, depth): an out-of-range id fails with its
/// position rather than silently yielding an all-zero row.
Expected<Tensor> oneHot(const Tensor &input, int64_t depth,
                        ElemType out = ElemType::F32);

/// A vocabulary file: one token per line, id = 0-based line number. A
/// token that appears twice keeps its first id. Trailing '\r' is removed
/// (CRLF files); nothing else is trimmed. Immutable, so one instance is
/// shared by every worker thread.
class Vocab {
public:
  /// Reads a vocabulary file.
  static Expected<std::shared_ptr<const Vocab>> load(const std::string &path);
  /// load() through a process-wide cache keyed by path, so every tokenize
  /// step and worker reading the same file shares one copy.
  static Expected<std::shared_ptr<const Vocab>> shared(const std::string &path);
  /// A vocabulary from tokens in id order (tests, inline vocabularies).
  static std::shared_ptr<const Vocab>
  fromTokens(std::vector<std::string> tokens);

  /// Id of `token`, or -1.
  int64_t lookup(std::string_view token) const;
  /// Number of lines (ids), including duplicates and empty lines.
  size_t size() const { return tokens_.size(); }
  const std::string &token(size_t id) const { return tokens_[id]; }

private:
  void buildIndex();
  std::vector<std::string> tokens_;
  std::vector<int64_t> slots_; ///< open addressing: id + 1, 0 = empty
  uint64_t mask_ = 0;
};

struct TokenizeOptions {
  bool lowercase = false;       ///< ASCII lowercase before lookup (UTF-8 safe)
  int64_t unknownId = -1;       ///< id of tokens not in the vocabulary
  ElemType out = ElemType::I64; ///< I32 or I64
  /// `encoding: replace`: invalid UTF-8 becomes U+FFFD (Utf8.h) before the
  /// split; otherwise (`strict`) it is an error naming the byte.
  bool replaceInvalid = false;
};

/// Splits a scalar String/Bytes on ASCII whitespace and maps each token to
/// its vocabulary id: -> out[num_tokens]. The text must be UTF-8 (see
/// TokenizeOptions::replaceInvalid); `replaced` (optional) receives how many
/// invalid sequences were replaced.
Expected<Tensor> tokenize(const Tensor &text, const Vocab &vocab,
                          const TokenizeOptions &options = {},
                          size_t *replaced = nullptr);

} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_CATEGORICAL_H
