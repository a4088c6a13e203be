/* asan-uninstrumented-llvm.h - LLVM's allocator poisoning off under ASan.
 *
 * Force-included (-include) in -DSLUICE_SANITIZE=address builds. LLVM's
 * headers decide from the compiler flags (LLVM_ADDRESS_SANITIZER_BUILD)
 * that LLVM itself is instrumented, so the inline BumpPtrAllocator,
 * Recycler and json::Value code in sluice's objects poisons slab memory
 * that Debian's uninstrumented libMLIR/libLLVM then hand out without
 * unpoisoning: every MLIR type built on both sides of the boundary was a
 * false "use-after-poison" (sluice-opt, `sluice run`). The two poisoning
 * calls become no-ops; ASan still checks every heap block, stack and
 * global of sluice's own code. sluice itself never calls them.
 */
#ifndef SLUICE_ASAN_UNINSTRUMENTED_LLVM_H
#define SLUICE_ASAN_UNINSTRUMENTED_LLVM_H
#include <sanitizer/asan_interface.h>
#undef __asan_poison_memory_region
#undef __asan_unpoison_memory_region
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))
#endif
