// RUN: sluice-opt %s -split-input-file -sluice-push-filters | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-push-filters=remarks=true -verify-diagnostics -o /dev/null

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>, label2: tensor<i64>}>>
!s3 = !sluice.stream<!sluice.record<{image: tensor<?x?x3xui8>, label: tensor<i64>, label2: tensor<i64>}>>

// A filter on the label moves before the decode, the random flip (draws are
// per source position, which filters keep) and a map writing another field;
// filters after shuffle and take stay where they are.
// CHECK-LABEL: sluice.pipeline @before_decode
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "image_folder"
// CHECK-NEXT:    %[[F:.*]] = sluice.filter %[[SRC]] {where = "label != 3"} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
// CHECK-NEXT:    %[[D:.*]] = sluice.element "decode_image"(%[[F]])
// CHECK-NEXT:    %[[R:.*]] = sluice.element "random_flip"(%[[D]])
// CHECK-NEXT:    %[[M:.*]] = sluice.map %[[R]]
// CHECK-NEXT:    %[[S:.*]] = sluice.select %[[M]]
// CHECK-NEXT:    %[[SH:.*]] = sluice.shuffle %[[S]]
// CHECK-NEXT:    %[[F2:.*]] = sluice.filter %[[SH]] {name = "filter.2"
// CHECK-NEXT:    %[[T:.*]] = sluice.take %[[F2]]
// CHECK-NEXT:    %[[F3:.*]] = sluice.filter %[[T]] {name = "filter.3"
// CHECK-NEXT:    sluice.output %[[F3]]
sluice.pipeline @before_decode seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg", "jpeg", "png"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.element "random_flip"(%1) {axis = "width", field = "image", p = 0.5} : !s1 -> !s1
  %3 = sluice.map %2 {as = "label2", expr = "x * 2", field = "label"} : !s1 -> !s2
  // expected-remark@+1 {{moved 'filter' before 'decode_image', 'random_flip', 'map': it reads only 'label', which they do not write, so the records it drops skip them; it stops there because it already follows the source}}
  %4 = sluice.filter %3 {where = "label != 3"} : !s2
  %5 = sluice.select %4 {fields = ["image", "label", "label2"]} : !s2 -> !s3
  %6 = sluice.shuffle %5 {buffer = 16 : i64} : !s3
  %7 = sluice.filter %6 {name = "filter.2", where = "label2 > 1"} : !s3
  %8 = sluice.take %7 {count = 100 : i64} : !s3
  %9 = sluice.filter %8 {name = "filter.3", where = "label2 < 100"} : !s3
  sluice.output %9 : !s3
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>, label2: tensor<i64>}>>
!s3 = !sluice.stream<!sluice.record<{label2: tensor<i64>, image: tensor<?x?x3xui8>}>>

// A filter that reads what a map writes stays after that map, but still
// moves before the steps above it (and across a select).
// CHECK-LABEL: sluice.pipeline @reads_map
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[M:.*]] = sluice.map %[[SRC]]
// CHECK-NEXT:    %[[F:.*]] = sluice.filter %[[M]] {where = "label2 > 4"} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, label2: tensor<i64>}>>
// CHECK-NEXT:    %[[D:.*]] = sluice.element "decode_image"(%[[F]])
// CHECK-NEXT:    %[[S:.*]] = sluice.select %[[D]]
// CHECK-NEXT:    sluice.output %[[S]]
!m = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, label2: tensor<i64>}>>
!d = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, label2: tensor<i64>, image: tensor<?x?x3xui8>}>>
sluice.pipeline @reads_map seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.map %0 {as = "label2", expr = "x * 2", field = "label"} : !s0 -> !m
  %2 = sluice.element "decode_image"(%1) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !m -> !d
  %3 = sluice.select %2 {fields = ["label2", "image"]} : !d -> !s3
  // expected-remark@+1 {{moved 'filter' before 'decode_image', 'select': it reads only 'label2', which they do not write, so the records it drops skip them; it stops there because 'map' writes 'label2', which the filter reads}}
  %4 = sluice.filter %3 {where = "label2 > 4"} : !s3
  sluice.output %4 : !s3
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>

// Nothing to cross: batch-free record ops and an in-place write block it.
// CHECK-LABEL: sluice.pipeline @stays
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.map
// CHECK-NEXT:    sluice.filter
// CHECK-NEXT:    sluice.skip
// CHECK-NEXT:    sluice.filter
sluice.pipeline @stays seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "x.npy"} : !s
  %1 = sluice.map %0 {expr = "x + 1", field = "x"} : !s -> !s
  %2 = sluice.filter %1 {where = "x > 0"} : !s
  %3 = sluice.skip %2 {count = 3} : !s
  %4 = sluice.filter %3 {name = "filter.2", where = "y > 0"} : !s
  sluice.output %4 : !s
}
