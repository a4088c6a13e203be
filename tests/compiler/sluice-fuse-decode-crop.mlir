// RUN: sluice-opt %s -split-input-file -sluice-fuse-decode-crop | FileCheck %s
// RUN: sluice-opt %s -split-input-file | FileCheck %s --check-prefix=OFF
// RUN: sluice-opt %s -split-input-file -sluice-fuse-decode-crop=remarks=true -verify-diagnostics -o /dev/null

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x24x3xui8>}>>

// The crop replaces the decoded field in place: fused, with the crop's step
// name for its random stream and the crop's location.
// CHECK-LABEL: sluice.pipeline @fused
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[F:.*]] = sluice.element "decode_random_resized_crop"(%[[SRC]]) {as = "image", channels = 3, crop_step = "random_resized_crop.2", field = "data", ratio = [0.75, 1.3333], scale = [0.08, 1.0], size = [32, 24]} {name = "decode_image+random_resized_crop.2"} : !sluice.stream<{{.*}}> -> !sluice.stream<{{.*}}image: tensor<32x24x3xui8>}>>
// CHECK-NEXT:    sluice.output %[[F]]
// OFF-LABEL:   sluice.pipeline @fused
// OFF-NEXT:      sluice.source
// OFF-NEXT:      sluice.element "decode_image"
// OFF-NEXT:      sluice.element "random_resized_crop"
sluice.pipeline @fused seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", as = "image", channels = 3} : !src -> !dec
  // expected-remark@+1 {{fused 'decode_image' into 'random_resized_crop.2': only the crop box of each JPEG is decoded}}
  %2 = sluice.element "random_resized_crop"(%1) {field = "image", size = [32, 24], scale = [0.08, 1.0], ratio = [0.75, 1.3333]} {name = "random_resized_crop.2"} : !dec -> !crp
  sluice.output %2 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<?x?x1xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<8x8x1xui8>}>>

// Without `as` the decode replaces the bytes, and the fused op does too.
// CHECK-LABEL: sluice.pipeline @fused_in_place
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"(%{{.*}}) {channels = 1, crop_step = "random_resized_crop", field = "data", size = [8, 8]} {name = "decode_image+random_resized_crop"}
// CHECK-NEXT:    sluice.output
sluice.pipeline @fused_in_place seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", channels = 1} : !src -> !dec
  // expected-remark@+1 {{fused 'decode_image' into 'random_resized_crop'}}
  %2 = sluice.element "random_resized_crop"(%1) {field = "data", size = [8, 8]} : !dec -> !crp
  sluice.output %2 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>, small: tensor<8x8x3xui8>}>>

// The crop keeps the decoded image visible as `image`: not fused.
// CHECK-LABEL: sluice.pipeline @decoded_image_used_later
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.element "random_resized_crop"
sluice.pipeline @decoded_image_used_later seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", as = "image", channels = 3} : !src -> !dec
  // expected-remark@+1 {{did not fuse 'decode_image' into 'random_resized_crop': the crop writes field 'small' and leaves the full decoded image 'image' in the record}}
  %2 = sluice.element "random_resized_crop"(%1) {field = "image", as = "small", size = [8, 8]} : !dec -> !crp
  sluice.output %2 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>}>>
!flp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<8x8x3xui8>}>>

// Only a crop right after the decode is fused.
// CHECK-LABEL: sluice.pipeline @not_adjacent
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.element "random_flip"
// CHECK-NEXT:    sluice.element "random_resized_crop"
sluice.pipeline @not_adjacent seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", as = "image", channels = 3} : !src -> !dec
  %2 = sluice.element "random_flip"(%1) {field = "image", axis = "width", p = 0.5} : !dec -> !flp
  %3 = sluice.element "random_resized_crop"(%2) {field = "image", size = [8, 8]} : !flp -> !crp
  sluice.output %3 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<8x8x3xui8>}>>

// A fixed schedule whose knobs agree keeps the fusion (the fused stage takes
// each step's knobs); a prefetch after the decode, or two parallelisms, keep
// both steps.
// CHECK-LABEL: sluice.pipeline @scheduled
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_random_resized_crop"{{.*}}name = "decode_image+random_resized_crop"
sluice.pipeline @scheduled seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {decode_image = {parallelism = 2}, random_resized_crop = {parallelism = 2, prefetch = 4}} {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", as = "image", channels = 3} : !src -> !dec
  // expected-remark@+1 {{fused 'decode_image' into 'random_resized_crop'}}
  %2 = sluice.element "random_resized_crop"(%1) {field = "image", size = [8, 8]} : !dec -> !crp
  sluice.output %2 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<8x8x3xui8>}>>

// CHECK-LABEL: sluice.pipeline @prefetch_between
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.element "random_resized_crop"
sluice.pipeline @prefetch_between seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {decode_image = {prefetch = 2}} {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", as = "image", channels = 3} : !src -> !dec
  // expected-remark@+1 {{did not fuse 'decode_image' into 'random_resized_crop': the schedule puts a prefetch after 'decode_image'}}
  %2 = sluice.element "random_resized_crop"(%1) {field = "image", size = [8, 8]} : !dec -> !crp
  sluice.output %2 : !crp
}

// -----

!src = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
!dec = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<?x?x3xui8>}>>
!crp = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, image: tensor<8x8x3xui8>}>>

// CHECK-LABEL: sluice.pipeline @two_parallelisms
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.element "random_resized_crop"
sluice.pipeline @two_parallelisms seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {decode_image = {parallelism = 2}, random_resized_crop = {parallelism = 1}} {
  %0 = sluice.source "image_folder" {root = "data"} : !src
  %1 = sluice.element "decode_image"(%0) {field = "data", as = "image", channels = 3} : !src -> !dec
  // expected-remark@+1 {{did not fuse 'decode_image' into 'random_resized_crop': the schedule gives 'decode_image' and 'random_resized_crop' different parallelisms}}
  %2 = sluice.element "random_resized_crop"(%1) {field = "image", size = [8, 8]} : !dec -> !crp
  sluice.output %2 : !crp
}
