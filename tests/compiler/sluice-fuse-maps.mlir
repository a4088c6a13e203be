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

// A fixed schedule that names a step keeps it out of any run (its knobs
// would be lost under the fused name); `as` equal to the field is fine.
// CHECK-LABEL: sluice.pipeline @scheduled
// CHECK:         sluice.element "fill_missing"
// CHECK-NOT:     sluice.fused
// CHECK-NEXT:    sluice.map {{.*}}sluice.fused = "map+clamp"
// CHECK-NEXT:    sluice.element "clamp"({{.*}}) {{{.*}}} {sluice.fused = "map+clamp"}
sluice.pipeline @scheduled seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {fill_missing = {parallelism = 2}} {
  %0 = sluice.source "npy" {files = "*.npy"} : !s
  %1 = sluice.element "fill_missing"(%0) {field = "x", value = 0.0} : !s -> !s
  // expected-remark@+1 {{fused 2 steps into 'map+clamp'}}
  %2 = sluice.map %1 {field = "x", as = "x", expr = "x * 2"} : !s -> !s
  %3 = sluice.element "clamp"(%2) {field = "x", max = 1.0} : !s -> !s
  sluice.output %3 : !s
}
