// RUN: sluice-opt %s -split-input-file -sluice-hoist-shuffle | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-hoist-shuffle=remarks=true -verify-diagnostics -o /dev/null

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<224x224x3xui8>}>>
!s3 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<224x224x3xf32>}>>
!s4 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<3x224x224xf32>}>>
!s5 = !sluice.stream<!sluice.record<{image: tensor<3x224x224xf32>, label: tensor<i64>}>>
!s6 = !sluice.stream<!sluice.record<{image: tensor<128x3x224x224xf32>, label: tensor<128xi64>}>>

// The README's order: the shuffle after the decode, the augmentations and the
// select moves right after the source, where a record is its encoded bytes.
// CHECK-LABEL: sluice.pipeline @readme_order
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "image_folder"
// CHECK-NEXT:    %[[SH:.*]] = sluice.shuffle %[[SRC]] {buffer = 4096 : i64} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
// CHECK-NEXT:    %[[D:.*]] = sluice.element "decode_image"(%[[SH]])
// CHECK-NEXT:    %[[C:.*]] = sluice.element "random_resized_crop"(%[[D]])
// CHECK-NEXT:    %[[F:.*]] = sluice.element "random_flip"(%[[C]])
// CHECK-NEXT:    %[[N:.*]] = sluice.element "normalize"(%[[F]])
// CHECK-NEXT:    %[[T:.*]] = sluice.element "transpose"(%[[N]])
// CHECK-NEXT:    %[[S:.*]] = sluice.select %[[T]]
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[S]]
// CHECK-NEXT:    sluice.output %[[B]]
sluice.pipeline @readme_order seed(42) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.element "random_resized_crop"(%1) {antialias = true, field = "image", interpolation = "bilinear", ratio = [0.75, 1.3333], scale = [0.08, 1.0], size = [224, 224]} : !s1 -> !s2
  %3 = sluice.element "random_flip"(%2) {axis = "width", field = "image", p = 0.5} : !s2 -> !s2
  %4 = sluice.element "normalize"(%3) {field = "image", mean = [123.675, 116.28, 103.53], std = [58.395, 57.12, 57.375]} : !s2 -> !s3
  %5 = sluice.element "transpose"(%4) {field = "image", to = "CHW"} : !s3 -> !s4
  %6 = sluice.select %5 {fields = ["image", "label"]} : !s4 -> !s5
  // expected-remark@+1 {{moved 'shuffle' before 'decode_image', 'random_resized_crop', 'random_flip', 'normalize', 'transpose', 'select' (right after the source): its buffer holds records of an estimated 64 KiB there instead of 588 KiB}}
  %7 = sluice.shuffle %6 {buffer = 4096 : i64} : !s5
  %8 = sluice.batch %7 {drop_remainder = true, size = 128 : i64} : !s5 -> !s6
  sluice.output %8 : !s6
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>
!s5 = !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, label: tensor<i64>}>>

// Under `on_error: skip` a step that may raise a data error can drop a
// record, so the shuffle does not cross it; above the select its records
// would only be larger, so it stays.
// CHECK-LABEL: sluice.pipeline @skip_bad_records
// CHECK:         sluice.select
// CHECK-NEXT:    sluice.shuffle
sluice.pipeline @skip_bad_records seed(42) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "skip", root = "imgs"} : !s0
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.element "center_crop"(%1) {field = "image", size = [32, 32]} : !s1 -> !s2
  %3 = sluice.select %2 {fields = ["image", "label"]} : !s2 -> !s5
  // expected-remark@+1 {{'shuffle' stays where it is: its records are smallest there}}
  %4 = sluice.shuffle %3 {buffer = 64 : i64} : !s5
  sluice.output %4 : !s5
}

// -----

!c = !sluice.stream<!sluice.record<{label: tensor<i64>, dense: tensor<13xf32>, cat: tensor<26xi64>}>>
!b = !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>>

// A filter changes how many records the shuffle would count: never crossed.
// A shuffle after a batch shuffles batches: the batch is never crossed.
// CHECK-LABEL: sluice.pipeline @filter_and_batch
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "csv"
// CHECK-NEXT:    %[[F:.*]] = sluice.filter %[[SRC]]
// CHECK-NEXT:    %[[SH:.*]] = sluice.shuffle %[[F]] {buffer = 100 : i64}
// CHECK-NEXT:    %[[M:.*]] = sluice.map %[[SH]]
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[M]]
// CHECK-NEXT:    %[[SH2:.*]] = sluice.shuffle %[[B]]
sluice.pipeline @filter_and_batch seed(1) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "csv" {columns = [{count = 1, name = "label", type = "i64"}, {count = 13, name = "dense", type = "f32"}, {count = 26, name = "cat", type = "hex32"}], delimiter = "\t", files = "d.tsv", header = false, on_error = "fail"} : !c
  %1 = sluice.filter %0 {where = "label >= 0"} : !c
  %2 = sluice.map %1 {expr = "log(max(x, 0) + 1)", field = "dense"} : !c -> !c
  // expected-remark@+1 {{moved 'shuffle' before 'map': its buffer holds records of an estimated 268 B there, as where it was written; that step gives one record for each record, so the output is the same}}
  %3 = sluice.shuffle %2 {buffer = 100 : i64} : !c
  %4 = sluice.batch %3 {size = 64 : i64} : !c -> !b
  // expected-remark@+1 {{'shuffle.2' stays where it is: 'batch' works on the stream (batch), so the records it gives depend on where the shuffle is}}
  %5 = sluice.shuffle %4 {buffer = 8 : i64, name = "shuffle.2"} : !b
  sluice.output %5 : !b
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>

// A fixed schedule that caches the crop's output keeps the shuffle below
// it (a cache above the shuffle would replay its order); it still crosses
// the flip.
// CHECK-LABEL: sluice.pipeline @cached_by_schedule
// CHECK:         %[[C:.*]] = sluice.element "center_crop"
// CHECK-NEXT:    %[[SH:.*]] = sluice.shuffle %[[C]]
// CHECK-NEXT:    sluice.element "random_flip"(%[[SH]])
sluice.pipeline @cached_by_schedule seed(42) epochs(2) budget(cores = 0, memory = 0) schedule {center_crop = {cache = "memory"}} {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.element "center_crop"(%1) {field = "image", size = [32, 32]} : !s1 -> !s2
  %3 = sluice.element "random_flip"(%2) {axis = "width", field = "image", p = 0.5} : !s2 -> !s2
  // expected-remark@+1 {{moved 'shuffle' before 'random_flip': its buffer holds records of an estimated 67 KiB there, as where it was written; that step gives one record for each record and draws by source position, so the output is the same; it stops there because the fixed schedule caches the output of 'center_crop'}}
  %4 = sluice.shuffle %3 {buffer = 64 : i64} : !s2
  sluice.output %4 : !s2
}
