// RUN: sluice-opt %s -split-input-file -sluice-fuse-maps | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-fuse-maps=remarks=true -verify-diagnostics -o /dev/null

!rec = !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>>

// The Criteo chain after sluice-fuse-map-batch: the three value-wise steps
// form one group, named after its steps; the batch before it stays alone.
// CHECK-LABEL: sluice.pipeline @criteo
// CHECK:         sluice.batch
// CHECK-NOT:     sluice.fused
// CHECK-SAME:    -> !sluice.stream
// CHECK-NEXT:    sluice.element "fill_missing"({{.*}}) {field = "dense", value = 0.0} {sluice.fused = "fill_missing+map+hash_bucket"}
// CHECK-NEXT:    sluice.map {{.*}} {expr = "log(max(x, 0) + 1)", field = "dense", sluice.fused = "fill_missing+map+hash_bucket"}
// CHECK-NEXT:    sluice.element "hash_bucket"({{.*}}) {buckets = 1000000, field = "cat"} {sluice.fused = "fill_missing+map+hash_bucket"}
// CHECK-NEXT:    sluice.output
!row = !sluice.stream<!sluice.record<{label: tensor<i64>, dense: tensor<13xf32>, cat: tensor<26xi64>}>>
sluice.pipeline @criteo seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !row
  %1 = sluice.batch %0 {size = 4096} : !row -> !rec
  // expected-remark@+1 {{fused 3 steps into 'fill_missing+map+hash_bucket': one kernel per field reads each value once and applies every step to it}}
  %2 = sluice.element "fill_missing"(%1) {field = "dense", value = 0.0} : !rec -> !rec
  %3 = sluice.map %2 {field = "dense", expr = "log(max(x, 0) + 1)"} : !rec -> !rec
  %4 = sluice.element "hash_bucket"(%3) {field = "cat", buckets = 1000000} : !rec -> !rec
  sluice.output %4 : !rec
}

// -----

!img = !sluice.stream<!sluice.record<{image: tensor<28x28x1xf32>, label: tensor<i64>}>>
!ids = !sluice.stream<!sluice.record<{image: tensor<28x28x1xf32>, label: tensor<i64>, bucket: tensor<i32>}>>

// A step with its own `as` and a random op end a run; runs of one step are
// left alone; per-record steps (no batch) fuse as well.
// CHECK-LABEL: sluice.pipeline @breaks
// CHECK:         sluice.element "clamp"({{.*}}) {{{.*}}} {sluice.fused = "clamp+map"}
// CHECK-NEXT:    sluice.map {{.*}}sluice.fused = "clamp+map"
// CHECK-NEXT:    sluice.element "bucketize"
// CHECK-NOT:     sluice.fused
// CHECK-NEXT:    sluice.element "clamp"
// CHECK-NOT:     sluice.fused
// CHECK-NEXT:    sluice.element "random_flip"
// CHECK-NOT:     sluice.fused
// CHECK-NEXT:    sluice.map
// CHECK-NOT:     sluice.fused
// CHECK:         sluice.output
sluice.pipeline @breaks seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "idx" {images = "i.gz", labels = "l.gz"} : !img
  // expected-remark@+1 {{fused 2 steps into 'clamp+map'}}
  %1 = sluice.element "clamp"(%0) {field = "image", min = -1.0, max = 2.0} : !img -> !img
  %2 = sluice.map %1 {field = "image", expr = "x * 2"} : !img -> !img
  %3 = sluice.element "bucketize"(%2) {field = "label", as = "bucket", boundaries = [2.0, 5.0]} : !img -> !ids
  %4 = sluice.element "clamp"(%3) {field = "image", min = 0.0} {name = "clamp.2"} : !ids -> !ids
  %5 = sluice.element "random_flip"(%4) {field = "image"} : !ids -> !ids
  %6 = sluice.map %5 {field = "image", expr = "x + 1", name = "map.2"} : !ids -> !ids
  sluice.output %6 : !ids
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<4xf32>}>>

// A fixed schedule's prefetch after a step ends the run there (fusing would
// drop the buffer); parallelisms that agree keep the steps fused (PlanGen
// gives the fused stage each step's knobs); two parallelisms split it.
// `as` equal to the field is fine.
// CHECK-LABEL: sluice.pipeline @scheduled
// CHECK:         sluice.element "fill_missing"
// CHECK-NOT:     sluice.fused
// CHECK-NEXT:    sluice.map {{.*}}sluice.fused = "map+clamp"
// CHECK-NEXT:    sluice.element "clamp"({{.*}}) {{{.*}}} {sluice.fused = "map+clamp"}
// CHECK-NEXT:    sluice.element "clamp"({{.*}}) {{{.*}}name = "clamp.2"}
// CHECK-NOT:     sluice.fused
sluice.pipeline @scheduled seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {fill_missing = {prefetch = 2}, map = {parallelism = 2}, clamp = {parallelism = 2}, clamp.2 = {parallelism = 1}} {
  %0 = sluice.source "npy" {files = "*.npy"} : !s
  %1 = sluice.element "fill_missing"(%0) {field = "x", value = 0.0} : !s -> !s
  // expected-remark@+1 {{fused 2 steps into 'map+clamp'}}
  %2 = sluice.map %1 {field = "x", as = "x", expr = "x * 2"} : !s -> !s
  %3 = sluice.element "clamp"(%2) {field = "x", max = 1.0} : !s -> !s
  %4 = sluice.element "clamp"(%3) {field = "x", min = 0.0} {name = "clamp.2"} : !s -> !s
  sluice.output %4 : !s
}

// -----

!row = !sluice.stream<!sluice.record<{pix: tensor<4x3xui8>, dense: tensor<13xf32>}>>
!rowf = !sluice.stream<!sluice.record<{pix: tensor<4x3xf32>, dense: tensor<13xf32>}>>

// normalize is value-wise too (its channel is the position's last index,
// which the generated loop knows): per record it joins `cast` before it and
// `clamp` after it, per batch `map` before it and `cast` after it. A
// normalize with its own `as` ends a run as any such step does.
// CHECK-LABEL: sluice.pipeline @normalize
// CHECK:         sluice.element "cast"({{.*}}) {{{.*}}} {sluice.fused = "cast+normalize+clamp"}
// CHECK-NEXT:    sluice.element "normalize"({{.*}}) {{{.*}}} {sluice.fused = "cast+normalize+clamp"}
// CHECK-NEXT:    sluice.element "clamp"({{.*}}) {{{.*}}} {sluice.fused = "cast+normalize+clamp"}
// CHECK-NEXT:    sluice.element "normalize"
// CHECK-NOT:     sluice.fused
// CHECK-NEXT:    sluice.batch
// CHECK-NEXT:    sluice.map {{.*}}sluice.fused = "map+normalize.3+cast.2"
// CHECK-NEXT:    sluice.element "normalize"({{.*}}) {{{.*}}sluice.fused = "map+normalize.3+cast.2"}
// CHECK-NEXT:    sluice.element "cast"({{.*}}) {{{.*}}sluice.fused = "map+normalize.3+cast.2"}
// CHECK-NEXT:    sluice.output
!rowp = !sluice.stream<!sluice.record<{pix: tensor<4x3xf32>, dense: tensor<13xf32>, p2: tensor<4x3xf32>}>>
!batp = !sluice.stream<!sluice.record<{pix: tensor<?x4x3xf32>, dense: tensor<?x13xf32>, p2: tensor<?x4x3xf32>}>>
!batp16 = !sluice.stream<!sluice.record<{pix: tensor<?x4x3xf32>, dense: tensor<?x13xf16>, p2: tensor<?x4x3xf32>}>>
sluice.pipeline @normalize seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !row
  // expected-remark@+1 {{fused 3 steps into 'cast+normalize+clamp'}}
  %1 = sluice.element "cast"(%0) {field = "pix", dtype = "f32"} : !row -> !rowf
  %2 = sluice.element "normalize"(%1) {field = "pix", mean = [1.0, 2.0, 3.0], std = [4.0, 5.0, 6.0]} : !rowf -> !rowf
  %3 = sluice.element "clamp"(%2) {field = "pix", min = -1.0, max = 1.0} : !rowf -> !rowf
  %4 = sluice.element "normalize"(%3) {field = "pix", as = "p2", mean = [0.5], std = [2.0]} {name = "normalize.2"} : !rowf -> !rowp
  %5 = sluice.batch %4 {size = 32} : !rowp -> !batp
  // expected-remark@+1 {{fused 3 steps into 'map+normalize.3+cast.2'}}
  %6 = sluice.map %5 {field = "dense", expr = "log(max(x, 0) + 1)"} : !batp -> !batp
  %7 = sluice.element "normalize"(%6) {field = "dense", mean = [0.5], std = [0.25]} {name = "normalize.3"} : !batp -> !batp
  %8 = sluice.element "cast"(%7) {field = "dense", dtype = "f16"} {name = "cast.2"} : !batp -> !batp16
  sluice.output %8 : !batp16
}
