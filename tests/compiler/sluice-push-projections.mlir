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

// -----

!c = !sluice.stream<!sluice.record<{image: tensor<3xf32>, label: tensor<i64>}>>
!w = !sluice.stream<!sluice.record<{label: tensor<3xf32>, image: tensor<i64>}>>
!o = !sluice.stream<!sluice.record<{label: tensor<3xf32>}>>

// A swap renames both fields at once: the `label` kept is the column read
// as `image`, so csv reads `image` and the entry for the unread column goes.
// CHECK-LABEL: sluice.pipeline @swap
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "csv" {{.*}}read = ["image"]} : !sluice.stream<!sluice.record<{image: tensor<3xf32>}>>
// CHECK-NEXT:    %[[R:.*]] = sluice.rename %[[SRC]] {mapping = {image = "label"}} : !sluice.stream<!sluice.record<{image: tensor<3xf32>}>> -> !sluice.stream<!sluice.record<{label: tensor<3xf32>}>>
// CHECK-NEXT:    sluice.output %[[R]]
sluice.pipeline @swap seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-remark@+1 {{csv reads only 'image': the cells of 'label' are counted but never converted, since nobody reads them}}
  %0 = sluice.source "csv" {columns = [{count = 3, name = "image", type = "f32"}, {count = 1, name = "label", type = "i64"}], delimiter = ",", files = "d.csv", header = false, on_error = "fail"} : !c
  %1 = sluice.rename %0 {mapping = {image = "label", label = "image"}} : !c -> !w
  // expected-remark@+1 {{removed 'select': the fields it keeps are now all that reach it}}
  %2 = sluice.select %1 {fields = ["label"]} : !w -> !o
  sluice.output %2 : !o
}

// -----

!c = !sluice.stream<!sluice.record<{a: tensor<i64>, b: tensor<f32>, c: tensor<2xf32>}>>
!r1 = !sluice.stream<!sluice.record<{a: tensor<i64>, x: tensor<f32>, b: tensor<2xf32>}>>
!r2 = !sluice.stream<!sluice.record<{a: tensor<i64>, y: tensor<f32>, b: tensor<2xf32>}>>
!o = !sluice.stream<!sluice.record<{y: tensor<f32>}>>

// A chain inside one mapping ({b: x, c: b}: the old `b` becomes `x` while
// `c` takes its name) and across two renames: `y` is the column `b`.
// CHECK-LABEL: sluice.pipeline @chain
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source "csv" {{.*}}read = ["b"]} : !sluice.stream<!sluice.record<{b: tensor<f32>}>>
// CHECK-NEXT:    %[[R1:.*]] = sluice.rename %[[SRC]] {mapping = {b = "x"}} : {{.*}} -> !sluice.stream<!sluice.record<{x: tensor<f32>}>>
// CHECK-NEXT:    %[[R2:.*]] = sluice.rename %[[R1]] {mapping = {x = "y"}, name = "rename.2"} : {{.*}} -> !sluice.stream<!sluice.record<{y: tensor<f32>}>>
// CHECK-NEXT:    sluice.output %[[R2]]
sluice.pipeline @chain seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-remark@+1 {{csv reads only 'b': the cells of 'a', 'c' are counted but never converted, since nobody reads them}}
  %0 = sluice.source "csv" {columns = [{count = 1, name = "a", type = "i64"}, {count = 1, name = "b", type = "f32"}, {count = 2, name = "c", type = "f32"}], delimiter = ",", files = "d.csv", header = false, on_error = "fail"} : !c
  %1 = sluice.rename %0 {mapping = {b = "x", c = "b"}} : !c -> !r1
  %2 = sluice.rename %1 {mapping = {x = "y"}, name = "rename.2"} : !r1 -> !r2
  // expected-remark@+1 {{removed 'select': the fields it keeps are now all that reach it}}
  %3 = sluice.select %2 {fields = ["y"]} : !r2 -> !o
  sluice.output %3 : !o
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
!s2 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, image: tensor<i64>, label: tensor<?x?x3xui8>}>>
!s3 = !sluice.stream<!sluice.record<{label: tensor<?x?x3xui8>}>>

// The swap after a decode whose image the select keeps under the name
// `label`: the decode is read, and nothing changes.
// CHECK-LABEL: sluice.pipeline @swap_keeps_decode
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.rename {{.*}} {mapping = {image = "label", label = "image"}}
// CHECK-NEXT:    sluice.select
sluice.pipeline @swap_keeps_decode seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3, field = "data", scale = "exact", verify = "window"} : !s0 -> !s1
  %2 = sluice.rename %1 {mapping = {image = "label", label = "image"}} : !s1 -> !s2
  %3 = sluice.select %2 {fields = ["label"]} : !s2 -> !s3
  sluice.output %3 : !s3
}

// -----

!s0 = !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s1 = !sluice.stream<!sluice.record<{p: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
!s2 = !sluice.stream<!sluice.record<{p: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, path: tensor<?x?x3xui8>}>>
!s3 = !sluice.stream<!sluice.record<{path: tensor<?x?x3xui8>}>>

// Nobody reads `p`, but the field is still there (image_folder cannot skip
// it): left as `path` it would collide with the decode's `as`, so the rename
// keeps its entry.
// CHECK-LABEL: sluice.pipeline @rename_unread_target
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.rename {{.*}} {mapping = {path = "p"}}
// CHECK-NEXT:    sluice.element "decode_image"
// CHECK-NEXT:    sluice.select
sluice.pipeline @rename_unread_target seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "image_folder" {extensions = ["jpg"], on_error = "fail", root = "imgs"} : !s0
  %1 = sluice.rename %0 {mapping = {path = "p"}} : !s0 -> !s1
  %2 = sluice.element "decode_image"(%1) {as = "path", channels = 3, field = "data", scale = "exact", verify = "window"} : !s1 -> !s2
  %3 = sluice.select %2 {fields = ["path"]} : !s2 -> !s3
  sluice.output %3 : !s3
}
