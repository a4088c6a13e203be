// sluice-fuse-crop-epilogue with leave-to-codegen=true (the code generator
// is on): an epilogue sluice-fuse-remaps makes one generated kernel is left
// unfolded; one it would not (a lone flip) is still folded.
// RUN: sluice-opt %s -split-input-file -sluice-fuse-crop-epilogue=leave-to-codegen=true | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-fuse-crop-epilogue="leave-to-codegen=true remarks=true" -verify-diagnostics -o /dev/null
// RUN: sluice-opt %s -split-input-file -sluice-fuse-crop-epilogue | FileCheck %s --check-prefix=FOLD

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xui8>}>>
!nrm = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xf32>}>>
!chw = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<3x8x6xf32>}>>

// CHECK-LABEL: sluice.pipeline @left
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"{{.*}}{name = "decode_image+random_resized_crop"}
// CHECK-NEXT:    sluice.element "random_flip"
// CHECK-NEXT:    sluice.element "normalize"
// CHECK-NEXT:    sluice.element "transpose"
// FOLD-LABEL:  sluice.pipeline @left
// FOLD-NEXT:     sluice.source
// FOLD-NEXT:     sluice.element "decode_random_resized_crop"{{.*}}layout = "CHW"{{.*}}{name = "decode_image+random_resized_crop+random_flip+normalize+transpose"}
// FOLD-NEXT:     sluice.output
sluice.pipeline @left seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", as = "image", channels = 3, crop_step = "random_resized_crop", size = [8, 6]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{left 'random_flip', 'normalize', 'transpose' after 'decode_image+random_resized_crop' to one generated kernel (sluice-fuse-remaps), which writes the batch row; --no-jit folds them into the resize}}
  %2 = sluice.element "random_flip"(%1) {field = "image", p = 0.25} : !crp -> !crp
  %3 = sluice.element "normalize"(%2) {field = "image", mean = [1.0, 2.0, 3.0], std = [4.0]} : !crp -> !nrm
  %4 = sluice.element "transpose"(%3) {field = "image", to = "CHW"} : !nrm -> !chw
  sluice.output %4 : !chw
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xui8>}>>
!nrm = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xf32>}>>

// A lone normalize compiles as a chain of one: left.
// CHECK-LABEL: sluice.pipeline @lone_normalize
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"{{.*}}{name = "decode_image+random_resized_crop"}
// CHECK-NEXT:    sluice.element "normalize"
// FOLD-LABEL:  sluice.pipeline @lone_normalize
// FOLD-NEXT:     sluice.source
// FOLD-NEXT:     sluice.element "decode_random_resized_crop"{{.*}}mean = [1.0, 2.0, 3.0]{{.*}}{name = "decode_image+random_resized_crop+normalize"}
sluice.pipeline @lone_normalize seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", as = "image", channels = 3, crop_step = "random_resized_crop", size = [8, 6]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{left 'normalize' after 'decode_image+random_resized_crop' to a generated kernel (alone, it writes the batch row; sluice-fuse-maps fuses it with value-wise steps after it); --no-jit folds them into the resize}}
  %2 = sluice.element "normalize"(%1) {field = "image", mean = [1.0, 2.0, 3.0], std = [4.0]} : !crp -> !nrm
  sluice.output %2 : !nrm
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xui8>}>>

// A lone flip is no generated kernel (sluice-fuse-remaps groups two or
// more steps): folded either way.
// CHECK-LABEL: sluice.pipeline @lone_flip
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"{{.*}}flip_step = "random_flip"{{.*}}{name = "decode_image+random_resized_crop+random_flip"}
// CHECK-NEXT:    sluice.output
sluice.pipeline @lone_flip seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", as = "image", channels = 3, crop_step = "random_resized_crop", size = [8, 6]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{folded 'random_flip' into 'decode_image+random_resized_crop'}}
  %2 = sluice.element "random_flip"(%1) {field = "image", p = 0.25} : !crp -> !crp
  sluice.output %2 : !crp
}
