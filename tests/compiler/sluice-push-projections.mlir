// RUN: sluice-opt %s -split-input-file -sluice-push-projections | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-push-projections=remarks=true -verify-diagnostics -o /dev/null

!c = !sluice.stream<!sluice.record<{label: tensor<i64>, a: tensor<3xf32>, b: tensor<f32>, id: tensor<i64>}>>
!m = !sluice.stream<!sluice.record<{label: tensor<i64>, a: tensor<3xf32>, b: tensor<f32>, id: tensor<i64>, b2: tensor<f32>}>>
!r = !sluice.stream<!sluice.record<{label: tensor<i64>, feats: tensor<3xf32>, b: tensor<f32>, id: tensor<i64>, bb: tensor<f32>}>>
!o = !sluice.stream<!sluice.record<{label: tensor<i64>, feats: tensor<3xf32>}>>

// csv reads only the columns the select keeps; the map nobody reads goes,
// the rename forgets it, and the select, now keeping all that reaches it,
// goes too.
// CHECK-LABEL: sluice.pipeline @csv
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "csv" {{.*}}read = ["label", "a"]} : !sluice.stream<!sluice.record<{label: tensor<i64>, a: tensor<3xf32>}>>
// CHECK-NEXT:    %[[R:.*]] = sluice.rename %[[SRC]] {mapping = {a = "feats"}} : !sluice.stream<!sluice.record<{label: tensor<i64>, a: tensor<3xf32>}>> -> !sluice.stream<!sluice.record<{label: tensor<i64>, feats: tensor<3xf32>}>>
// CHECK-NEXT:    sluice.output %[[R]] : !sluice.stream<!sluice.record<{label: tensor<i64>, feats: tensor<3xf32>}>>
sluice.pipeline @csv seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-remark@+1 {{csv reads only 'label', 'a': the cells of 'b', 'id' are counted but never converted, since nobody reads them}}
  %0 = sluice.source "csv" {columns = [{count = 1, name = "label", type = "i64"}, {count = 3, name = "a", type = "f32"}, {count = 1, name = "b", type = "f32"}, {count = 1, name = "id", type = "hex32"}], delimiter = ",", files = "d.csv", header = false, on_error = "fail"} : !c
  // expected-remark@+1 {{removed 'map': nobody downstream reads 'b2', so it is never computed}}
  %1 = sluice.map %0 {as = "b2", expr = "x * 2", field = "b"} : !c -> !m
  %2 = sluice.rename %1 {mapping = {a = "feats", b2 = "bb"}} : !m -> !r
  // expected-remark@+1 {{removed 'select': the fields it keeps are now all that reach it}}
  %3 = sluice.select %2 {fields = ["label", "feats"]} : !r -> !o
  sluice.output %3 : !o
}

// -----

!t = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, text: tensor<!sluice.string>}>>
!d = !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>, label: tensor<i64>, text: tensor<!sluice.string>, image: tensor<?x?x3xui8>}>>
!l = !sluice.stream<!sluice.record<{label: tensor<i64>}>>
!b = !sluice.stream<!sluice.record<{label: tensor<?xi64>}>>

// Only the label survives: the image is never decoded and tfrecord parses
// only the label feature.
// CHECK-LABEL: sluice.pipeline @tfrecord_label_only
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "tfrecord" {features = [{as = "label", name = "image/class/label", shape = [], type = "i64"}], files = "x.tfrecord", on_error = "fail"} : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[SRC]]
// CHECK-NEXT:    sluice.output %[[B]]
sluice.pipeline @tfrecord_label_only seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-remark@+1 {{tfrecord parses only 'label': the features 'data', 'text' are skipped unparsed, since nobody reads them}}
  %0 = sluice.source "tfrecord" {features = [{as = "data", name = "image/encoded", shape = [], type = "bytes"}, {as = "label", name = "image/class/label", shape = [], type = "i64"}, {as = "text", name = "image/text", shape = [], type = "string"}], files = "x.tfrecord", on_error = "fail"} : !t
  // expected-remark@+1 {{removed 'decode_image': nobody downstream reads 'image', so it is never computed}}
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !t -> !d
  // expected-remark@+1 {{removed 'select': the fields it keeps are now all that reach it}}
  %2 = sluice.select %1 {fields = ["label"]} : !d -> !l
  %3 = sluice.batch %2 {size = 8 : i64} : !l -> !b
  sluice.output %3 : !b
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{label: tensor<i64>}>>

// image_folder cannot skip fields, but the decode still goes; a filter's
// fields count as read. A step a fixed schedule names stays (its knobs would
// otherwise silently apply to nothing).
// CHECK-LABEL: sluice.pipeline @image_folder
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "image_folder" {{.*}} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
// CHECK-NEXT:    %[[F:.*]] = sluice.filter %[[SRC]]
// CHECK-NEXT:    %[[S:.*]] = sluice.select %[[F]]
// CHECK-NEXT:    sluice.output %[[S]]
sluice.pipeline @image_folder seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  // expected-remark@+1 {{removed 'decode_image': nobody downstream reads 'image', so it is never computed}}
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.filter %1 {where = "label > 0"} : !s1
  %3 = sluice.select %2 {fields = ["label"]} : !s1 -> !s2
  sluice.output %3 : !s2
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{label: tensor<i64>}>>

// CHECK-LABEL: sluice.pipeline @scheduled
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.select
sluice.pipeline @scheduled seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {decode_image = {parallelism = 2 : i64}} {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.select %1 {fields = ["label"]} : !s1 -> !s2
  sluice.output %2 : !s2
}
