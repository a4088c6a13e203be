//===- MathImpl.h - One definition of log for interpreter and codegen -*- C++
//-*-===//
//
// `log` in a map expression costs ~4 ns per value as a libm call, and a call
// stops the loop vectorizer. Generated kernels must still round exactly as
// the interpreter does (turning codegen off changes no byte), so both use
// this one algorithm, written once over an abstract "ops" backend:
//   - ScalarOps (below) runs it on doubles: the interpreter's log;
//   - compiler/lib/Codegen instantiates it with a backend whose operations
//     build MLIR arith ops: the same operations in the same order, so the
//     same bits, and branch-free, so LLVM vectorizes it.
// The algorithm is fdlibm's e_log.c (Sun Microsystems, 1993; error < 1 ulp)
// with its |f| < 2^-20 shortcut dropped (the general formula is as accurate
// there) and its branches turned into selects. Special values: log(NaN) is
// the NaN (quieted, payload kept), log(+inf) = +inf, log(+-0) = -inf,
// log(x < 0) = the x86/libm default NaN (0xFFF8000000000000), as glibc.
// Within 1 ulp of glibc's log (20 million random inputs). Operations are
// never contracted into FMAs (the pragma below; the JIT never emits fmuladd).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_MATHIMPL_H
#define SLUICE_OPS_KERNELS_MATHIMPL_H

#include <cstdint>
#include <cstring>

namespace sluice::math {

/// log(x) for doubles on backend `B` (types B::F, B::I, B::M).
template <class B> typename B::F logImpl(B &b, typename B::F x) {
  using F = typename B::F;
  using I = typename B::I;
  const double ln2Hi = 6.93147180369123816490e-01;
  const double ln2Lo = 1.90821492927058770002e-10;
  const double lg1 = 6.666666666666735130e-01, lg2 = 3.999999999940941908e-01,
               lg3 = 2.857142874366239149e-01, lg4 = 2.222219843214978396e-01,
               lg5 = 1.818357216161805012e-01, lg6 = 1.531383769920937332e-01,
               lg7 = 1.479819860511658591e-01;

  I ix = b.bits(x);
  // Subnormals: scale into the normal range first.
  auto isSub = b.ult(b.isub(ix, b.i(1)), b.i(0x000FFFFFFFFFFFFFll));
  F xs = b.sel(isSub, b.mul(x, b.f(18014398509481984.0 /* 2^54 */)), x);
  I k = b.isel(isSub, b.i(-54), b.i(0));
  I xb = b.bits(xs);
  I hx = b.ashr(xb, 32);
  I lx = b.iand(xb, b.i(0xFFFFFFFFll));
  k = b.iadd(k, b.isub(b.ashr(hx, 20), b.i(1023)));
  hx = b.iand(hx, b.i(0x000FFFFF));
  I i = b.iand(b.iadd(hx, b.i(0x95F64)), b.i(0x100000));
  // x or x/2 with the exponent of 1, so that sqrt(2)/2 <= x < sqrt(2).
  I high = b.ior(hx, b.ixor(i, b.i(0x3FF00000)));
  F xn = b.fromBits(b.ior(b.shl(high, 32), lx));
  k = b.iadd(k, b.ashr(i, 20));
  F f = b.sub(xn, b.f(1.0));
  F s = b.div(f, b.add(b.f(2.0), f));
  F dk = b.itof(k);
  F z = b.mul(s, s);
  I ii = b.isub(hx, b.i(0x6147A));
  F w = b.mul(z, z);
  I j = b.isub(b.i(0x6B851), hx);
  F t1 =
      b.mul(w, b.add(b.f(lg2), b.mul(w, b.add(b.f(lg4), b.mul(w, b.f(lg6))))));
  F t2 = b.mul(
      z, b.add(b.f(lg1),
               b.mul(w, b.add(b.f(lg3),
                              b.mul(w, b.add(b.f(lg5), b.mul(w, b.f(lg7))))))));
  ii = b.ior(ii, j);
  F r = b.add(t2, t1);
  F hfsq = b.mul(b.mul(b.f(0.5), f), f);
  F sHR = b.mul(s, b.add(hfsq, r));
  F a0 = b.sub(f, b.sub(hfsq, sHR));
  F a1 = b.sub(b.mul(dk, b.f(ln2Hi)),
               b.sub(b.sub(hfsq, b.add(sHR, b.mul(dk, b.f(ln2Lo)))), f));
  F sFR = b.mul(s, b.sub(f, r));
  F b0 = b.sub(f, sFR);
  F b1 =
      b.sub(b.mul(dk, b.f(ln2Hi)), b.sub(b.sub(sFR, b.mul(dk, b.f(ln2Lo))), f));
  auto kZero = b.ieq(k, b.i(0));
  F out = b.sel(b.igt(ii, b.i(0)), b.sel(kZero, a0, a1), b.sel(kZero, b0, b1));

  I absBits = b.iand(ix, b.i(0x7FFFFFFFFFFFFFFFll));
  out = b.sel(b.ieq(ix, b.i(0x7FF0000000000000ll)), x, out); // +inf
  out =
      b.sel(b.ilt(ix, b.i(0)), b.fromBits(b.i(int64_t(0xFFF8000000000000ull))),
            out); // x < 0: the x86/libm default NaN
  out = b.sel(b.ieq(absBits, b.i(0)),
              b.fromBits(b.i(int64_t(0xFFF0000000000000ull))),
              out);                            // +-0 -> -inf
  out = b.sel(b.funo(x, x), b.add(x, x), out); // NaN: quieted x
  return out;
}

/// The backend on plain doubles.
struct ScalarOps {
  using F = double;
  using I = int64_t;
  using M = bool;
  F f(double c) { return c; }
  I i(int64_t c) { return c; }
  I bits(F x) {
    I r;
    std::memcpy(&r, &x, 8);
    return r;
  }
  F fromBits(I v) {
    F r;
    std::memcpy(&r, &v, 8);
    return r;
  }
  F add(F a, F c) { return a + c; }
  F sub(F a, F c) { return a - c; }
  F mul(F a, F c) { return a * c; }
  F div(F a, F c) { return a / c; }
  F itof(I v) { return static_cast<double>(v); }
  I iadd(I a, I c) { return I(uint64_t(a) + uint64_t(c)); }
  I isub(I a, I c) { return I(uint64_t(a) - uint64_t(c)); }
  I iand(I a, I c) { return a & c; }
  I ior(I a, I c) { return a | c; }
  I ixor(I a, I c) { return a ^ c; }
  I ashr(I a, int n) { return a >> n; }
  I shl(I a, int n) { return I(uint64_t(a) << n); }
  M ult(I a, I c) { return uint64_t(a) < uint64_t(c); }
  M ilt(I a, I c) { return a < c; }
  M igt(I a, I c) { return a > c; }
  M ieq(I a, I c) { return a == c; }
  M funo(F a, F c) { return a != a || c != c; }
  F sel(M m, F a, F c) { return m ? a : c; }
  I isel(M m, I a, I c) { return m ? a : c; }
};

/// sluice's log: logImpl on ScalarOps (defined in MathCalls.cpp, compiled
/// without FP contraction).
double log(double x);
/// out[i] = log(x[i]) for i < n, the same bits as log(): logImpl inlined
/// into a loop the compiler vectorizes (built for AVX2 and the baseline,
/// picked at run time; both without FP contraction). The interpreter's
/// `log` runs through it: a call per value of log() stops vectorization
/// and cost twice the libm call it replaced.
void logArray(const double *x, double *out, int64_t n);

} // namespace sluice::math

#endif // SLUICE_OPS_KERNELS_MATHIMPL_H
