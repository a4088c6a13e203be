//===- RemapKernels.cpp - Index-remap chains as loop nests
//------------------===//
//
// Lowers a remap chain (sluice-fuse-remaps: crop, flip, transpose, pad and
// the value steps between them) to one loop nest over the output that reads
// each element back through every step; the value steps come from
// ValueKernels.cpp.
//
//===----------------------------------------------------------------------===//
#include "ValueLowering.h"
#include "sluice/ops/Switches.h"

#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Scalar.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

using namespace mlir;

namespace sluice::compiler::codegen {

using mlir::Value;

// --- remap chains (sluice-fuse-remaps) ----------------------------------===//
//
//   func.func @sluice_kN(%in: !llvm.ptr, %out: !llvm.ptr, %params: !llvm.ptr)
//     scf.for %o0 ... scf.for %o1 ...          one loop per output dim
//       idx_n = (o0, o1, ...)                  output position
//       idx_k = remap_k^-1(idx_k+1)            back through every step:
//                                              crop +offset, flip D-1-i,
//                                              transpose permutes, pad -before
//       v = in[idx_0]                          (0 where a pad is outside)
//       v = step_k(v) for k = 0..n-1           value steps; pads select their
//                                              value where idx_k is outside
//       out[idx_n] = v
//
// Sizes, crop offsets and flip flags are loads from %params (the layout of
// runtime/RemapChain.h), so one function serves every record. An output
// dim that is the input's channel dim with a small static size (3 in HWC,
// or after a transpose to CHW) is unrolled innermost: the loop then walks
// the input's pixels in order with the channel a constant (normalize's
// per-channel constants fold), and a CHW result is one plane per channel,
// which LLVM vectorizes as an interleaved load (de-interleaving shuffles),
// not as gathers. A lone `normalize` is compiled the same way.
//
// A flip's draw is the same for every element of a record, but as a select
// on the index it makes the input position non-affine: LLVM then vectorizes
// the loop only if its unswitching copies the loop for both values, which
// it skips once the body is large (a bf16 or f16 store's rounding is enough),
// and the loop stays scalar. So the kernel branches on each flip's draw
// above the loop nest and builds the nest once per outcome, each with an
// affine index (forward or mirrored) that LLVM vectorizes:
//
//     scf.if %flip != 0 { nest, reading W-1-x } else { nest, reading x }
//
// Up to kMaxFlipVersions nests; SLUICE_NO_FLIP_VERSIONS=1 builds the one
// nest with the select (same output, tests/unit/compiler_remap_test.cpp).

namespace {

/// The steps' value lowerings the remap kernel reuses must all be covered.
bool remapValueStepCovered(const runtime::RemapChain::Step &st) {
  if (!supportedElem(st.inElem) || !supportedElem(st.outElem))
    return false;
  const runtime::PlanStep &s = *st.stage;
  if (st.kind != runtime::RemapChain::Kind::Value)
    return true;
  if (valueFormOf(s) == ValueForm::ScaleShift) // any channel count (tables)
    return st.outElem == normalizeOutElem(s) && normalizeChannels(s) > 0;
  std::string field, out;
  ElemType in, o;
  return coveredStep(s, field, out, in, o) && field == out && in == st.inElem &&
         o == st.outElem;
}

} // namespace

bool remapKernel(const runtime::PlanStep &s, std::vector<KernelSpec> &out) {
  Expected<runtime::RemapChain> chain = runtime::RemapChain::build(s);
  if (!chain)
    return false;
  for (const runtime::RemapChain::Step &st : chain->steps())
    if (!remapValueStepCovered(st))
      return false;
  KernelSpec k;
  k.stage = s.name;
  k.funcName = "sluice_k" + std::to_string(out.size());
  k.field = k.outField = chain->field();
  k.inElem = chain->inElem();
  k.outElem = chain->outElem();
  int o = s.outputType.indexOf(k.field);
  if (o >= 0)
    k.outShape = s.outputType.fields()[size_t(o)].type.shape;
  k.outShape.resize(chain->rankAt(chain->steps().size()), -1);
  // The static shape at every step's input, and the output's.
  for (size_t st = 0; st <= chain->steps().size(); ++st) {
    const runtime::PlanStep *at =
        st < chain->steps().size() ? chain->steps()[st].stage : nullptr;
    const RecordType &type = at ? at->inputType : s.outputType;
    int f = type.indexOf(k.field);
    std::vector<int64_t> dims;
    if (f >= 0)
      dims = type.fields()[size_t(f)].type.shape;
    dims.resize(chain->rankAt(st), kDynamic);
    k.staticDims.push_back(std::move(dims));
  }
  k.chain = std::make_shared<const runtime::RemapChain>(chain.take());
  out.push_back(std::move(k));
  return true;
}

namespace {

/// The output dim that is the input's last (channel) dim after the chain's
/// transposes, if it has a small static size.
std::optional<size_t> unrolledChannelDim(const KernelSpec &k) {
  const runtime::RemapChain &c = *k.chain;
  size_t outRank = c.rankAt(c.steps().size());
  size_t inRank = c.rankAt(0);
  if (inRank < 2 || outRank < 2)
    return std::nullopt;
  for (size_t j = 0; j < outRank; ++j) {
    if (k.outShape[j] < 1 || k.outShape[j] > 4)
      continue;
    size_t d = j;
    for (size_t s = c.steps().size(); s-- > 0;) {
      const runtime::RemapChain::Step &st = c.steps()[s];
      if (st.kind == runtime::RemapChain::Kind::Transpose)
        d = size_t(st.perm[d]);
    }
    if (d == inRank - 1)
      return j;
  }
  return std::nullopt;
}

/// How many copies of the loop nest a kernel may have for its flips' draws
/// (two flips: four).
constexpr size_t kMaxFlipVersions = 4;

bool flipVersionsDisabled() { return switchedOff("SLUICE_NO_FLIP_VERSIONS"); }

} // namespace

bool buildRemapKernel(OpBuilder &b, ModuleOp module, const KernelSpec &k,
                      std::string &error) {
  using Kind = runtime::RemapChain::Kind;
  MLIRContext *ctx = b.getContext();
  const runtime::RemapChain &c = *k.chain;
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  Type i64 = b.getI64Type();
  Block *entry = beginKernel(b, module, k, {ptr, ptr, ptr});
  Value in = entry->getArgument(0), outPtr = entry->getArgument(1),
        params = entry->getArgument(2);
  auto param = [&](size_t i) -> Value {
    Value at = b.create<LLVM::GEPOp>(loc, ptr, i64, params,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    return b.create<LLVM::LoadOp>(loc, i64, at);
  };
  // Every size and draw, loaded once at the top.
  size_t n = c.steps().size();
  std::vector<std::vector<Value>> dims(n + 1);
  std::vector<std::vector<Value>> draws(n);
  for (size_t s = 0; s <= n; ++s) {
    for (size_t d = 0; d < c.rankAt(s); ++d) {
      int64_t known = s < k.staticDims.size() && d < k.staticDims[s].size()
                          ? k.staticDims[s][d]
                          : kDynamic;
      dims[s].push_back(known > 0 ? constInt(b, loc, i64, known)
                                  : param(c.dimsAt(s) + d));
    }
    if (s < n) {
      Kind kind = c.steps()[s].kind;
      size_t count = kind == Kind::CenterCrop || kind == Kind::RandomCrop ? 2
                     : kind == Kind::Flip                                 ? 1
                                                                          : 0;
      for (size_t j = 0; j < count; ++j)
        draws[s].push_back(param(c.drawAt(s) + j));
    }
  }
  std::optional<size_t> unrolled = unrolledChannelDim(k);
  if (n == 1 && c.steps()[0].kind == Kind::Value &&
      valueFormOf(*c.steps()[0].stage) == ValueForm::ScaleShift && !unrolled &&
      std::max(c.steps()[0].meanCount, c.steps()[0].stdCount) > 1) {
    buildFlatNormalize(b, k, dims[0], in, outPtr);
    b.setInsertionPointToEnd(entry);
    b.create<func::ReturnOp>(loc);
    return true;
  }
  Value zero = constInt(b, loc, i64, 0), one = constInt(b, loc, i64, 1);
  size_t outRank = c.rankAt(n);
  int64_t copies = unrolled ? k.outShape[*unrolled] : 1;
  Type inT = storageType(ctx, k.inElem), outT = storageType(ctx, k.outElem);
  // The steps whose flip draw the nest is built for, and for each the
  // outcome (1: mirrored) of the nest being built; the other flips select.
  std::vector<size_t> versioned;
  if (!flipVersionsDisabled())
    for (size_t s = 0; s < n; ++s)
      if (c.steps()[s].kind == Kind::Flip &&
          (size_t(2) << versioned.size()) <= kMaxFlipVersions)
        versioned.push_back(s);
  std::vector<int> flipped(n, -1);
  // The loop nest over the output dims (the unrolled one left out), at the
  // builder's insertion point.
  auto buildNest = [&]() -> bool {
    OpBuilder::InsertionGuard guard(b);
    std::vector<Value> oIdx(outRank);
    for (size_t j = 0; j < outRank; ++j) {
      if (unrolled && *unrolled == j)
        continue;
      auto loop = b.create<scf::ForOp>(loc, zero, dims[n][j], one);
      b.setInsertionPointToStart(loop.getBody());
      oIdx[j] = loop.getInductionVar();
    }
    for (int64_t u = 0; u < copies; ++u) {
      if (unrolled)
        oIdx[*unrolled] = constInt(b, loc, i64, u);
      // Backward: the position at every step's input, and the bounds checks.
      std::vector<std::vector<Value>> at(n + 1);
      std::vector<Value> inside(n);
      at[n] = oIdx;
      for (size_t s = n; s-- > 0;) {
        const runtime::RemapChain::Step &st = c.steps()[s];
        std::vector<Value> idx = at[s + 1];
        auto checkAll = [&](const std::vector<size_t> &which) {
          Value ok;
          for (size_t d : which) {
            Value in = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult,
                                               idx[d], dims[s][d]);
            ok = ok ? b.create<arith::AndIOp>(loc, ok, in).getResult() : in;
          }
          return ok;
        };
        switch (st.kind) {
        case Kind::Value:
          break;
        case Kind::CenterCrop:
        case Kind::RandomCrop:
          idx[0] = b.create<arith::AddIOp>(loc, idx[0], draws[s][0]);
          idx[1] = b.create<arith::AddIOp>(loc, idx[1], draws[s][1]);
          if (st.kind == Kind::RandomCrop && st.padding > 0)
            inside[s] = checkAll({0, 1});
          break;
        case Kind::Flip: {
          if (flipped[s] == 0) // this nest's draw: not flipped
            break;
          size_t a = size_t(st.axis);
          Value last = b.create<arith::SubIOp>(loc, dims[s][a], one);
          Value mirrored = b.create<arith::SubIOp>(loc, last, idx[a]);
          if (flipped[s] == 1) {
            idx[a] = mirrored;
            break;
          }
          Value flip = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne,
                                               draws[s][0], zero);
          idx[a] = b.create<arith::SelectOp>(loc, flip, mirrored, idx[a]);
          break;
        }
        case Kind::Transpose: {
          std::vector<Value> from(idx.size());
          for (size_t j = 0; j < idx.size(); ++j)
            from[size_t(st.perm[j])] = idx[j];
          idx = from;
          break;
        }
        case Kind::Pad: {
          std::vector<size_t> padded;
          for (size_t d = 0; d < idx.size(); ++d)
            if (st.pads[d].first || st.pads[d].second) {
              if (st.pads[d].first)
                idx[d] = b.create<arith::SubIOp>(
                    loc, idx[d], constInt(b, loc, i64, st.pads[d].first));
              padded.push_back(d);
            }
          if (!padded.empty())
            inside[s] = checkAll(padded);
          break;
        }
        }
        at[s] = idx;
      }
      // The input element (row-major), at position 0 when a pad is outside.
      Value lin = zero;
      for (size_t d = 0; d < at[0].size(); ++d) {
        lin =
            d ? b.create<arith::MulIOp>(loc, lin, dims[0][d]).getResult() : lin;
        lin = b.create<arith::AddIOp>(loc, lin, at[0][d]);
      }
      Value all;
      for (Value ok : inside)
        if (ok)
          all = all ? b.create<arith::AndIOp>(loc, all, ok).getResult() : ok;
      if (all)
        lin = b.create<arith::SelectOp>(loc, all, lin, zero);
      Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{lin});
      Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
      // Forward: the value steps, and the pads' values where they are outside.
      for (size_t s = 0; s < n; ++s) {
        const runtime::RemapChain::Step &st = c.steps()[s];
        Location stepLoc = NameLoc::get(b.getStringAttr(st.stage->name));
        if (inside[s]) {
          double fill = st.kind == Kind::Pad ? st.value : 0;
          Value pv = elemConstant(b, stepLoc, v.elem, fill);
          v.value = b.create<arith::SelectOp>(stepLoc, inside[s], v.value, pv);
        }
        if (st.kind != Kind::Value)
          continue;
        if (valueFormOf(*st.stage) == ValueForm::ScaleShift) {
          Value ch = at[s].empty() ? zero : at[s].back();
          v = lowerNormalize(b, stepLoc, *st.stage, v, ch);
        } else if (!lowerStep(b, stepLoc, *st.stage, v, st.outElem, error)) {
          return false;
        }
        if (v.elem != st.outElem) {
          error = "step '" + st.stage->name + "' lowered to the wrong type";
          return false;
        }
      }
      Value olin = zero;
      for (size_t d = 0; d < outRank; ++d) {
        olin = d ? b.create<arith::MulIOp>(loc, olin, dims[n][d]).getResult()
                 : olin;
        olin = b.create<arith::AddIOp>(loc, olin, oIdx[d]);
      }
      Value dst =
          b.create<LLVM::GEPOp>(loc, ptr, outT, outPtr, ValueRange{olin});
      b.create<LLVM::StoreOp>(loc, v.value, dst);
    }
    return true;
  };
  // One nest per outcome of the versioned draws: scf.if on the first draw,
  // in each branch on the next, the nests at the leaves.
  auto buildVersions = [&](auto &self, size_t next) -> bool {
    if (next == versioned.size())
      return buildNest();
    size_t s = versioned[next];
    Value flip = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne,
                                         draws[s][0], zero);
    auto branch = b.create<scf::IfOp>(loc, flip, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    for (int taken : {1, 0}) {
      b.setInsertionPointToStart(taken ? branch.thenBlock()
                                       : branch.elseBlock());
      flipped[s] = taken;
      if (!self(self, next + 1))
        return false;
    }
    flipped[s] = -1;
    return true;
  };
  if (!buildVersions(buildVersions, 0))
    return false;
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(loc);
  return true;
}

} // namespace sluice::compiler::codegen
