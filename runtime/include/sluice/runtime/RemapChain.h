//===- RemapChain.h - Index-remap chains and their per-record numbers -*- C++
//-*-===//
//
// sluice-fuse-remaps groups a run of steps on one field that only move
// values (center_crop, random_crop, random_flip, transpose, pad) with the
// value-wise steps around them (cast, normalize, clamp, fill_missing, map,
// hash_bucket, bucketize) into one `fused_map` stage. The code generator
// compiles such a chain to ONE kernel for every record: out[o] =
// f(in[remap(o)]), where remap is the composition of the steps' index maps.
// What differs between records (the image's size, the crop offsets a
// random_crop draws, whether random_flip flips) is not compiled in: it is a
// block of int64 parameters the runtime fills per record and passes to the
// kernel.
//
// This file is that contract, shared by both sides (and MLIR-free): the
// parameter layout the generator reads (RemapChain::dimsAt/drawAt) and the
// per-record fill that draws exactly what the unfused steps draw, from the
// same (seed, epoch, record index, step stream) Rng, in the same order.
//
// Parameter block, for steps k = 0..n-1 of the chain:
//   [dimsAt(k) .. +rankAt(k))  the field's shape at step k's input
//   [drawAt(k) .. +draws(k))   crop: top, left (of the box in the input,
//                              possibly negative with random_crop padding);
//                              random_flip: 1 if it flips, else 0
//   [dimsAt(n) .. +rankAt(n))  the output shape
//
// A record the steps would reject (an image smaller than the crop, a
// normalize whose mean does not fit the channels, an empty tensor) is not
// the kernel's business: fill() returns false and the caller runs the
// unfused steps, which report the error they always reported.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_REMAPCHAIN_H
#define SLUICE_RUNTIME_REMAPCHAIN_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/Plan.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::runtime {

/// Ops that only move values (what makes a chain a remap chain).
bool isRemapOp(const std::string &op);
/// Value-wise ops a remap chain may also contain.
bool isRemapValueOp(const std::string &op);

class RemapChain {
public:
  enum class Kind { Value, CenterCrop, RandomCrop, Flip, Transpose, Pad };

  /// One step as the kernel sees it.
  struct Step {
    Kind kind = Kind::Value;
    const PlanStep *stage = nullptr; ///< in the fused step's `fused`
    size_t inRank = 0, outRank = 0;
    ElemType inElem = ElemType::U8, outElem = ElemType::U8;
    int64_t height = 0, width = 0; ///< crops: the output size
    int64_t padding = 0;           ///< random_crop
    int axis = 1;                  ///< random_flip: 0 height, 1 width
    double p = 0.5;                ///< random_flip
    uint64_t stream = 0;           ///< random steps: their Rng stream
    std::vector<int64_t> perm;     ///< transpose: out dim j = in dim perm[j]
    std::vector<std::pair<int64_t, int64_t>> pads; ///< pad: before, after
    double value = 0;                              ///< pad: the fill
    size_t meanCount = 0, stdCount = 0;            ///< normalize
  };

  /// The chain of a `fused_map` stage whose steps all work on one field
  /// (no `as`), at least one of them a remap op or a normalize (whose
  /// constants depend on the position), every one a remap or a remap value
  /// op; or of a lone `normalize` step (a chain of one). Fails (with why)
  /// for any other stage.
  static Expected<RemapChain> build(const PlanStep &fused);

  const std::string &field() const { return field_; }
  const std::vector<Step> &steps() const { return steps_; }
  ElemType inElem() const { return steps_.front().inElem; }
  ElemType outElem() const { return steps_.back().outElem; }
  /// Rank of the field at step k's input; k == steps().size(): the output.
  size_t rankAt(size_t k) const;
  /// Offsets in the parameter block (see the file comment).
  size_t dimsAt(size_t k) const { return dimsAt_[k]; }
  size_t drawAt(size_t k) const { return drawAt_[k]; }
  /// Length of the parameter block.
  size_t paramCount() const { return count_; }

  /// Fills `params` (paramCount() values) for one record whose field is
  /// `in`, drawing the random steps' numbers; `outShape` gets the result's
  /// shape. False when the record must take the unfused steps instead.
  bool fill(const Tensor &in, uint64_t seed, uint64_t epoch, uint64_t index,
            int64_t *params, std::vector<int64_t> &outShape) const;

private:
  std::string field_;
  std::vector<Step> steps_;
  std::vector<size_t> dimsAt_, drawAt_;
  size_t count_ = 0;
};

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_REMAPCHAIN_H
