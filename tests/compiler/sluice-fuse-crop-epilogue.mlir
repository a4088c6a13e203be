// RUN: sluice-opt %s -split-input-file -sluice-fuse-crop-epilogue | FileCheck %s
// RUN: sluice-opt %s -split-input-file | FileCheck %s --check-prefix=OFF
// RUN: sluice-opt %s -split-input-file -sluice-fuse-crop-epilogue=remarks=true -verify-diagnostics -o /dev/null

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xui8>}>>
!nrm = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<8x6x3xf32>}>>
!chw = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<3x8x6xf32>}>>

// Flip, normalize and transpose on the cropped field: all three folded, the
// flip's step name kept for its random stream.
// CHECK-LABEL: sluice.pipeline @folded
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[F:.*]] = sluice.element "decode_random_resized_crop"(%[[SRC]]) {as = "image", channels = 3, crop_step = "random_resized_crop", field = "data", flip_p = 0.25, flip_step = "random_flip", layout = "CHW", mean = [1.0, 2.0, 3.0], size = [8, 6], std = [4.0]} {name = "decode_image+random_resized_crop+random_flip+normalize+transpose"} : !sluice.stream<{{.*}}> -> !sluice.stream<{{.*}}image: tensor<3x8x6xf32>}>>
// CHECK-NEXT:    sluice.output %[[F]]
// OFF-LABEL:   sluice.pipeline @folded
// OFF-NEXT:      sluice.source
// OFF-NEXT:      sluice.element "decode_random_resized_crop"
// OFF-NEXT:      sluice.element "random_flip"
// OFF-NEXT:      sluice.element "normalize"
// OFF-NEXT:      sluice.element "transpose"
sluice.pipeline @folded seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", as = "image", channels = 3, crop_step = "random_resized_crop", size = [8, 6]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{folded 'random_flip', 'normalize', 'transpose' into 'decode_image+random_resized_crop': done while the resize writes each row}}
  %2 = sluice.element "random_flip"(%1) {field = "image", p = 0.25} : !crp -> !crp
  %3 = sluice.element "normalize"(%2) {field = "image", mean = [1.0, 2.0, 3.0], std = [4.0]} : !crp -> !nrm
  %4 = sluice.element "transpose"(%3) {field = "image", to = "CHW"} : !nrm -> !chw
  sluice.output %4 : !chw
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<8x8x3xui8>}>>
!nrm = !sluice.stream<!sluice.record<{data: tensor<8x8x3xf32>}>>

// A flip along the height stops the fold after the normalize before it.
// CHECK-LABEL: sluice.pipeline @height_flip
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"(%{{.*}}) {channels = 3, crop_step = "random_resized_crop", field = "data", mean = [0.0], size = [8, 8], std = [2.0]} {name = "decode_image+random_resized_crop+normalize"}
// CHECK-NEXT:    sluice.element "random_flip"
// CHECK-NEXT:    sluice.output
sluice.pipeline @height_flip seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", channels = 3, crop_step = "random_resized_crop", size = [8, 8]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{folded 'normalize' into 'decode_image+random_resized_crop'}}
  %2 = sluice.element "normalize"(%1) {field = "data", mean = [0.0], std = [2.0]} : !crp -> !nrm
  // expected-remark@+1 {{did not fold 'random_flip' into 'decode_image+random_resized_crop': it flips along the height}}
  %3 = sluice.element "random_flip"(%2) {field = "data", axis = "height"} : !nrm -> !nrm
  sluice.output %3 : !nrm
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<8x8x3xui8>}>>
!flp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<8x8x3xui8>, flipped: tensor<8x8x3xui8>}>>

// A flip into another field leaves the crop visible: not folded.
// CHECK-LABEL: sluice.pipeline @other_field
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"(%{{.*}}) {as = "image", channels = 3, crop_step = "random_resized_crop", field = "data", size = [8, 8]} {name = "decode_image+random_resized_crop"}
// CHECK-NEXT:    sluice.element "random_flip"
sluice.pipeline @other_field seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", as = "image", channels = 3, crop_step = "random_resized_crop", size = [8, 8]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{did not fold 'random_flip' into 'decode_image+random_resized_crop': it writes field 'flipped' and leaves the cropped image in the record}}
  %2 = sluice.element "random_flip"(%1) {field = "image", as = "flipped"} : !crp -> !flp
  sluice.output %2 : !flp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<4x5x1xui8>}>>
!chw = !sluice.stream<!sluice.record<{data: tensor<1x4x5xui8>}>>
!nrm = !sluice.stream<!sluice.record<{data: tensor<1x4x5xf32>}>>

// A transpose by `perm` is folded (u8 CHW); a normalize after the
// transpose would see W as the channel dim and is left alone.
// CHECK-LABEL: sluice.pipeline @perm_then_normalize
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"(%{{.*}}) {channels = 1, crop_step = "random_resized_crop", field = "data", layout = "CHW", size = [4, 5]} {name = "decode_image+random_resized_crop+transpose"} : {{.*}} -> !sluice.stream<!sluice.record<{data: tensor<1x4x5xui8>}>>
// CHECK-NEXT:    sluice.element "normalize"
sluice.pipeline @perm_then_normalize seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", channels = 1, crop_step = "random_resized_crop", size = [4, 5]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{folded 'transpose' into 'decode_image+random_resized_crop'}}
  %2 = sluice.element "transpose"(%1) {field = "data", perm = [2, 0, 1]} : !crp -> !chw
  // expected-remark@+1 {{did not fold 'normalize' into 'decode_image+random_resized_crop': it comes after the transpose}}
  %3 = sluice.element "normalize"(%2) {field = "data", mean = [0.0], std = [1.0]} : !chw -> !nrm
  sluice.output %3 : !nrm
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<8x8x3xui8>}>>

// A fixed schedule that puts a prefetch after the crop keeps the flip a
// step of its own; the same parallelism on both would keep the fold.
// CHECK-LABEL: sluice.pipeline @scheduled
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"(%{{.*}}) {channels = 3, crop_step = "random_resized_crop", field = "data", size = [8, 8]} {name = "decode_image+random_resized_crop"}
// CHECK-NEXT:    sluice.element "random_flip"
sluice.pipeline @scheduled seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {random_flip = {parallelism = 2}, random_resized_crop = {prefetch = 2}} {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", channels = 3, crop_step = "random_resized_crop", size = [8, 8]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{did not fold 'random_flip' into 'decode_image+random_resized_crop': the schedule puts a prefetch after 'random_resized_crop'}}
  %2 = sluice.element "random_flip"(%1) {field = "data"} : !crp -> !crp
  sluice.output %2 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<8x8x3xui8>}>>

// CHECK-LABEL: sluice.pipeline @scheduled_agreeing
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"(%{{.*}}) {{{.*}}flip_step = "random_flip"{{.*}}}
// CHECK-NEXT:    sluice.output
sluice.pipeline @scheduled_agreeing seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {random_flip = {parallelism = 2}, random_resized_crop = {parallelism = 2}, decode_image = {parallelism = 2}} {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_random_resized_crop"(%0) {field = "data", channels = 3, crop_step = "random_resized_crop", size = [8, 8]} {name = "decode_image+random_resized_crop"} : !src -> !crp
  // expected-remark@+1 {{folded 'random_flip' into 'decode_image+random_resized_crop'}}
  %2 = sluice.element "random_flip"(%1) {field = "data"} : !crp -> !crp
  sluice.output %2 : !crp
}
