// RUN: sluice-opt %s -split-input-file -sluice-eliminate-noops | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-eliminate-noops=remarks=true -verify-diagnostics -o /dev/null

!s = !sluice.stream<!sluice.record<{x: tensor<4xf32>, y: tensor<i64>}>>

// CHECK-LABEL: sluice.pipeline @record_noops
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    sluice.output %[[SRC]]
sluice.pipeline @record_noops seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-remark@+1 {{removed 'select': it selects every field in the existing order}}
  %1 = sluice.select %0 {fields = ["x", "y"]} : !s -> !s
  // expected-remark@+1 {{removed 'rename': it renames no field}}
  %2 = sluice.rename %1 {mapping = {x = "x"}} : !s -> !s
  // expected-remark@+1 {{removed 'skip': it skips 0 records}}
  %3 = sluice.skip %2 {count = 0} : !s
  // expected-remark@+1 {{removed 'repeat': it repeats the stream once}}
  %4 = sluice.repeat %3 {count = 1} : !s
  // expected-remark@+1 {{removed 'shuffle': it shuffles with a buffer of 1 record}}
  %5 = sluice.shuffle %4 {buffer = 1} : !s
  // expected-remark@+1 {{removed 'shard': it splits into a single shard}}
  %6 = sluice.shard %5 {num_shards = 1, index = 0} : !s
  // expected-remark@+1 {{removed 'prefetch': it prefetches 0 records}}
  %7 = sluice.prefetch %6 {buffer = 0} : !s
  sluice.output %7 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<4xf32>, y: tensor<i64>}>>
!r = !sluice.stream<!sluice.record<{y: tensor<i64>, x: tensor<4xf32>}>>
!z = !sluice.stream<!sluice.record<{y: tensor<i64>, z: tensor<4xf32>}>>

// The same ops with parameters that do something stay.
// CHECK-LABEL: sluice.pipeline @record_ops
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.select
// CHECK-NEXT:    sluice.rename
// CHECK-NEXT:    sluice.skip
// CHECK-NEXT:    sluice.repeat
// CHECK-NEXT:    sluice.shuffle
// CHECK-NEXT:    sluice.shard
// CHECK-NEXT:    sluice.prefetch
// CHECK-NEXT:    sluice.take
// CHECK-NEXT:    sluice.output
sluice.pipeline @record_ops seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  %1 = sluice.select %0 {fields = ["y", "x"]} : !s -> !r
  %2 = sluice.rename %1 {mapping = {x = "z"}} : !r -> !z
  %3 = sluice.skip %2 {count = 1} : !z
  %4 = sluice.repeat %3 : !z
  %5 = sluice.shuffle %4 {buffer = 2} : !z
  %6 = sluice.shard %5 {num_shards = 2, index = 1} : !z
  %7 = sluice.prefetch %6 : !z
  %8 = sluice.take %7 {count = 0} : !z
  sluice.output %8 : !z
}

// -----

!hwc = !sluice.stream<!sluice.record<{image: tensor<8x8x3xf32>}>>
!chw = !sluice.stream<!sluice.record<{image: tensor<3x8x8xf32>}>>
!copy = !sluice.stream<!sluice.record<{image: tensor<3x8x8xf32>, same: tensor<3x8x8xf32>}>>

// CHECK-LABEL: sluice.pipeline @element_noops
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[T:.*]] = sluice.element "transpose"(%[[SRC]]) {field = "image", to = "CHW"}
// CHECK-NEXT:    %[[C:.*]] = sluice.element "cast"(%[[T]]) {as = "same", dtype = "f32", field = "image"}
// CHECK-NEXT:    sluice.output %[[C]]
sluice.pipeline @element_noops seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !hwc
  // expected-remark@+1 {{removed 'cast': it casts to the element type the field already has}}
  %1 = sluice.element "cast"(%0) {field = "image", dtype = "f32"} : !hwc -> !hwc
  // expected-remark@+1 {{removed 'transpose.2': it transposes with the identity permutation}}
  %2 = sluice.element "transpose"(%1) {field = "image", perm = [0, 1, 2]} {name = "transpose.2"} : !hwc -> !hwc
  %3 = sluice.element "transpose"(%2) {field = "image", to = "CHW"} : !hwc -> !chw
  // A cast into another field adds a field: not a no-op.
  %4 = sluice.element "cast"(%3) {field = "image", as = "same", dtype = "f32"} {name = "cast.2"} : !chw -> !copy
  sluice.output %4 : !copy
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<4xf32>}>>

// A stage named by a fixed schedule is kept: removing it would silently drop
// the prefetch the user asked for after it.
// CHECK-LABEL: sluice.pipeline @scheduled
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.shuffle
// CHECK-NEXT:    sluice.output
sluice.pipeline @scheduled seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {shuffle = {prefetch = 4}} {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  %1 = sluice.shuffle %0 {buffer = 1} : !s
  sluice.output %1 : !s
}
