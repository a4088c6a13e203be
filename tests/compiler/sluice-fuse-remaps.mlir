// RUN: sluice-opt %s -split-input-file -sluice-fuse-remaps | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-fuse-remaps=remarks=true -verify-diagnostics -o /dev/null
// RUN: sluice-opt %s -split-input-file -sluice-fuse-remaps -sluice-fuse-maps | FileCheck %s --check-prefix=BOTH

!u8 = !sluice.stream<!sluice.record<{image: tensor<?x?x3xui8>, label: tensor<i64>}>>
!r = !sluice.stream<!sluice.record<{image: tensor<256x256x3xui8>, label: tensor<i64>}>>
!c = !sluice.stream<!sluice.record<{image: tensor<224x224x3xui8>, label: tensor<i64>}>>
!f = !sluice.stream<!sluice.record<{image: tensor<224x224x3xf32>, label: tensor<i64>}>>
!chw = !sluice.stream<!sluice.record<{image: tensor<3x224x224xf32>, label: tensor<i64>}>>

// The validation-style epilogue after a resize: crop, flip, normalize and
// the CHW transpose become one group (one kernel); the resize stays a
// library kernel.
// CHECK-LABEL: sluice.pipeline @epilogue
// CHECK:         sluice.element "resize"
// CHECK-NOT:     sluice.fused
// CHECK-SAME:    -> !sluice.stream
// CHECK-NEXT:    sluice.element "center_crop"({{.*}}) {field = "image", size = [224, 224]} {sluice.fused = "center_crop+random_flip+normalize+transpose"}
// CHECK-NEXT:    sluice.element "random_flip"{{.*}} {sluice.fused = "center_crop+random_flip+normalize+transpose"}
// CHECK-NEXT:    sluice.element "normalize"{{.*}} {sluice.fused = "center_crop+random_flip+normalize+transpose"}
// CHECK-NEXT:    sluice.element "transpose"{{.*}} {sluice.fused = "center_crop+random_flip+normalize+transpose"}
// CHECK-NEXT:    sluice.output
sluice.pipeline @epilogue seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "r"} : !u8
  %1 = sluice.element "resize"(%0) {field = "image", size = [256, 256]} : !u8 -> !r
  // expected-remark@+1 {{fused 4 steps into 'center_crop+random_flip+normalize+transpose': one kernel computes each output value from its input position; sizes, crop offsets and flip draws are its arguments}}
  %2 = sluice.element "center_crop"(%1) {field = "image", size = [224, 224]} : !r -> !c
  %3 = sluice.element "random_flip"(%2) {field = "image"} : !c -> !c
  %4 = sluice.element "normalize"(%3) {field = "image", mean = [0.5], std = [0.25]} : !c -> !f
  %5 = sluice.element "transpose"(%4) {field = "image", to = "CHW"} : !f -> !chw
  sluice.output %5 : !chw
}

// -----

!img = !sluice.stream<!sluice.record<{image: tensor<28x28xui8>, label: tensor<i64>}>>
!imgf = !sluice.stream<!sluice.record<{image: tensor<28x28xf32>, label: tensor<i64>}>>
!two = !sluice.stream<!sluice.record<{image: tensor<28x28xf32>, label: tensor<f32>}>>

// Value-wise runs without a step that moves values are sluice-fuse-maps'
// business; a step on another field ends a run, a lone remap step is left
// alone.
// CHECK-LABEL: sluice.pipeline @runs
// CHECK:         sluice.element "random_crop"{{.*}} {sluice.fused = "random_crop+normalize"}
// CHECK-NEXT:    sluice.element "normalize"{{.*}} {sluice.fused = "random_crop+normalize"}
// CHECK-NOT:     sluice.fused
// CHECK:         sluice.output
// The value steps that follow are then grouped by sluice-fuse-maps alone.
// BOTH-LABEL: sluice.pipeline @runs
// BOTH:         sluice.element "random_crop"{{.*}} {sluice.fused = "random_crop+normalize"}
// BOTH-NEXT:    sluice.element "normalize"{{.*}} {sluice.fused = "random_crop+normalize"}
// BOTH-NEXT:    sluice.element "cast"{{.*}} {sluice.fused = "cast+clamp"}
// BOTH-NEXT:    sluice.element "clamp"{{.*}} {sluice.fused = "cast+clamp"}
// BOTH-NEXT:    sluice.element "pad"
// BOTH-NOT:     sluice.fused
// BOTH:         sluice.output
sluice.pipeline @runs seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "idx" {images = "i.gz", labels = "l.gz"} : !img
  // expected-remark@+1 {{fused 2 steps into 'random_crop+normalize'}}
  %1 = sluice.element "random_crop"(%0) {field = "image", size = [28, 28], padding = 2} : !img -> !img
  %2 = sluice.element "normalize"(%1) {field = "image", mean = [72.94], std = [90.02]} : !img -> !imgf
  %3 = sluice.element "cast"(%2) {field = "label", dtype = "f32"} : !imgf -> !two
  %4 = sluice.element "clamp"(%3) {field = "label", min = 0.0} : !two -> !two
  %5 = sluice.element "pad"(%4) {field = "image", padding = [0]} : !two -> !two
  sluice.output %5 : !two
}

// -----

!img = !sluice.stream<!sluice.record<{image: tensor<8x6x3xui8>}>>
!chw = !sluice.stream<!sluice.record<{image: tensor<3x8x6xui8>}>>
!ids = !sluice.stream<!sluice.record<{image: tensor<3x8x6xi64>}>>
!pad = !sluice.stream<!sluice.record<{image: tensor<10x8x3xui8>}>>
!bkt = !sluice.stream<!sluice.record<{image: tensor<10x8x3xi32>}>>

// hash_bucket and bucketize are value-wise too: they join a remap run.
// CHECK-LABEL: sluice.pipeline @buckets
// CHECK:         sluice.element "transpose"({{.*}}) {{{.*}}} {sluice.fused = "transpose+hash_bucket"}
// CHECK-NEXT:    sluice.element "hash_bucket"({{.*}}) {{{.*}}} {sluice.fused = "transpose+hash_bucket"}
// CHECK-LABEL: sluice.pipeline @buckets2
// CHECK:         sluice.element "pad"({{.*}}) {{{.*}}} {sluice.fused = "pad+bucketize"}
// CHECK-NEXT:    sluice.element "bucketize"({{.*}}) {{{.*}}} {sluice.fused = "pad+bucketize"}
sluice.pipeline @buckets seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !img
  // expected-remark@+1 {{fused 2 steps into 'transpose+hash_bucket'}}
  %1 = sluice.element "transpose"(%0) {field = "image", to = "CHW"} : !img -> !chw
  %2 = sluice.element "hash_bucket"(%1) {field = "image", buckets = 5} : !chw -> !ids
  sluice.output %2 : !ids
}
sluice.pipeline @buckets2 seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !img
  // expected-remark@+1 {{fused 2 steps into 'pad+bucketize'}}
  %1 = sluice.element "pad"(%0) {field = "image", padding = [1]} : !img -> !pad
  %2 = sluice.element "bucketize"(%1) {field = "image", boundaries = [10.0, 100.0]} : !pad -> !bkt
  sluice.output %2 : !bkt
}
