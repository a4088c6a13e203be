// RUN: sluice-opt %s -split-input-file -sluice-fuse-map-batch | FileCheck %s
// RUN: sluice-opt %s -split-input-file -sluice-fuse-map-batch=remarks=true -verify-diagnostics -o /dev/null

!rec = !sluice.stream<!sluice.record<{label: tensor<i64>, dense: tensor<13xf32>, cat: tensor<26xi64>}>>
!hashed = !sluice.stream<!sluice.record<{label: tensor<i64>, dense: tensor<13xf32>, cat: tensor<26xi64>}>>
!brec = !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>>

// The Criteo chain: every step moves, in its order, and keeps its location.
// CHECK-LABEL: sluice.pipeline @criteo
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[F:.*]] = sluice.filter %[[SRC]]
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[F]] {size = 4096 : i64} : !sluice.stream<!sluice.record<{label: tensor<i64>, dense: tensor<13xf32>, cat: tensor<26xi64>}>> -> !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>>
// CHECK-NEXT:    %[[FM:.*]] = sluice.element "fill_missing"(%[[B]]) {field = "dense", value = 0.0} : !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>> -> !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>>
// CHECK-NEXT:    %[[M:.*]] = sluice.map %[[FM]] {expr = "log(max(x, 0) + 1)", field = "dense"}
// CHECK-NEXT:    %[[H:.*]] = sluice.element "hash_bucket"(%[[M]]) {buckets = 1000000, field = "cat"}
// CHECK-NEXT:    sluice.output %[[H]] : !sluice.stream<!sluice.record<{label: tensor<?xi64>, dense: tensor<?x13xf32>, cat: tensor<?x26xi64>}>>
sluice.pipeline @criteo seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !rec
  %1 = sluice.filter %0 {where = "label >= 0"} : !rec
  // expected-remark@+1 {{moved 'fill_missing' after 'batch': it replaces each NaN on its own, so it runs once per batch of up to 4096 records}}
  %2 = sluice.element "fill_missing"(%1) {field = "dense", value = 0.0} : !rec -> !rec
  // expected-remark@+1 {{moved 'map' after 'batch': it computes each value}}
  %3 = sluice.map %2 {field = "dense", expr = "log(max(x, 0) + 1)"} : !rec -> !rec
  // expected-remark@+1 {{moved 'hash_bucket' after 'batch': it hashes each value on its own}}
  %4 = sluice.element "hash_bucket"(%3) {field = "cat", buckets = 1000000} : !rec -> !hashed
  %5 = sluice.batch %4 {size = 4096} : !hashed -> !brec
  sluice.output %5 : !brec
}

// -----

!u8 = !sluice.stream<!sluice.record<{image: tensor<28x28x1xui8>, label: tensor<i64>}>>
!f32 = !sluice.stream<!sluice.record<{image: tensor<28x28x1xf32>, label: tensor<i64>}>>
!ids = !sluice.stream<!sluice.record<{image: tensor<28x28x1xf32>, label: tensor<i64>, bucket: tensor<i32>}>>
!b32 = !sluice.stream<!sluice.record<{image: tensor<32x28x28x1xf32>, label: tensor<32xi64>, bucket: tensor<32xi32>}>>

// Types change along the chain (u8 -> f32, a new field from `as`); each
// moved step's result is its old one with the batch dim, and a static batch
// dim (drop_remainder) is kept.
// CHECK-LABEL: sluice.pipeline @typed
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[SRC]] {drop_remainder = true, size = 32 : i64} : !sluice.stream<!sluice.record<{image: tensor<28x28x1xui8>, label: tensor<i64>}>> -> !sluice.stream<!sluice.record<{image: tensor<32x28x28x1xui8>, label: tensor<32xi64>}>>
// CHECK-NEXT:    %[[N:.*]] = sluice.element "normalize"(%[[B]]) {{.*}} -> !sluice.stream<!sluice.record<{image: tensor<32x28x28x1xf32>, label: tensor<32xi64>}>>
// CHECK-NEXT:    %[[C:.*]] = sluice.element "clamp"(%[[N]])
// CHECK-NEXT:    %[[K:.*]] = sluice.element "bucketize"(%[[C]]) {{.*}} -> !sluice.stream<!sluice.record<{image: tensor<32x28x28x1xf32>, label: tensor<32xi64>, bucket: tensor<32xi32>}>>
// CHECK-NEXT:    sluice.output %[[K]]
sluice.pipeline @typed seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "idx" {images = "i.gz", labels = "l.gz"} : !u8
  // expected-remark@+1 {{moved 'normalize' after 'batch': it normalizes per channel along the last dim, which batching leaves in place, so it runs once per batch of 32 records}}
  %1 = sluice.element "normalize"(%0) {field = "image", mean = [72.94], std = [90.02]} : !u8 -> !f32
  // expected-remark@+1 {{moved 'clamp' after 'batch'}}
  %2 = sluice.element "clamp"(%1) {field = "image", min = -1.0, max = 2.0} : !f32 -> !f32
  // expected-remark@+1 {{moved 'bucketize' after 'batch'}}
  %3 = sluice.element "bucketize"(%2) {field = "label", as = "bucket", boundaries = [2.0, 5.0]} : !f32 -> !ids
  %4 = sluice.batch %3 {size = 32, drop_remainder = true} : !ids -> !b32
  sluice.output %4 : !b32
}

// -----

!s = !sluice.stream<!sluice.record<{tokens: tensor<?xi64>}>>
!p = !sluice.stream<!sluice.record<{tokens: tensor<?x16xi64>}>>

// Before padded_batch nothing moves: the padding values would be
// transformed too.
// CHECK-LABEL: sluice.pipeline @padded
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.element "clamp"
// CHECK-NEXT:    sluice.padded_batch
// CHECK-NEXT:    sluice.output
sluice.pipeline @padded seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !s
  %1 = sluice.element "clamp"(%0) {field = "tokens", max = 100.0} : !s -> !s
  %2 = sluice.padded_batch %1 {size = 8, length = 16} : !s -> !p
  sluice.output %2 : !p
}

// -----

!img = !sluice.stream<!sluice.record<{image: tensor<28x28x1xf32>}>>
!b = !sluice.stream<!sluice.record<{image: tensor<?x28x28x1xf32>}>>

// A random op stops the move: the steps after it move, it and the steps
// before it stay.
// CHECK-LABEL: sluice.pipeline @random_stops
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[C1:.*]] = sluice.element "clamp"(%[[SRC]]) {{.*}}name = "clamp.1"
// CHECK-NEXT:    %[[R:.*]] = sluice.element "random_flip"(%[[C1]])
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[R]]
// CHECK-NEXT:    %[[C2:.*]] = sluice.element "clamp"(%[[B]]) {{.*}}name = "clamp.2"
// CHECK-NEXT:    sluice.output %[[C2]]
sluice.pipeline @random_stops seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !img
  %1 = sluice.element "clamp"(%0) {field = "image", min = 0.0} {name = "clamp.1"} : !img -> !img
  %2 = sluice.element "random_flip"(%1) {field = "image", axis = "width", p = 0.5} : !img -> !img
  // expected-remark@+1 {{moved 'clamp.2' after 'batch'}}
  %3 = sluice.element "clamp"(%2) {field = "image", max = 1.0} {name = "clamp.2"} : !img -> !img
  %4 = sluice.batch %3 {size = 4} : !img -> !b
  sluice.output %4 : !b
}

// -----

!ids = !sluice.stream<!sluice.record<{label: tensor<i64>, x: tensor<4xf32>}>>
!oh = !sluice.stream<!sluice.record<{label: tensor<10xf32>, x: tensor<4xf32>}>>
!boh = !sluice.stream<!sluice.record<{label: tensor<?x10xf32>, x: tensor<?x4xf32>}>>

// Mixed chain: one_hot (per-record data errors) stops it, a cast right
// before the batch moves; a step separated from the batch by a shuffle
// stays.
// CHECK-LABEL: sluice.pipeline @mixed
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[M:.*]] = sluice.map %[[SRC]]
// CHECK-NEXT:    %[[S:.*]] = sluice.shuffle %[[M]]
// CHECK-NEXT:    %[[O:.*]] = sluice.element "one_hot"(%[[S]])
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[O]] {size = 2 : i64} : !sluice.stream<!sluice.record<{label: tensor<10xf32>, x: tensor<4xf32>}>> -> !sluice.stream<!sluice.record<{label: tensor<?x10xf32>, x: tensor<?x4xf32>}>>
// CHECK-NEXT:    %[[C:.*]] = sluice.element "cast"(%[[B]])
// CHECK-NEXT:    sluice.output %[[C]]
sluice.pipeline @mixed seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !ids
  %1 = sluice.map %0 {field = "x", expr = "x * 2"} : !ids -> !ids
  %2 = sluice.shuffle %1 {buffer = 16} : !ids
  %3 = sluice.element "one_hot"(%2) {field = "label", depth = 10} : !ids -> !oh
  // expected-remark@+1 {{moved 'cast' after 'batch'}}
  %4 = sluice.element "cast"(%3) {field = "x", dtype = "f32"} : !oh -> !oh
  %5 = sluice.batch %4 {size = 2} : !oh -> !boh
  sluice.output %5 : !boh
}

// -----

!rgb = !sluice.stream<!sluice.record<{image: tensor<4x4x3xui8>}>>
!rgbf = !sluice.stream<!sluice.record<{image: tensor<4x4x3xf32>}>>
!brgbf = !sluice.stream<!sluice.record<{image: tensor<?x4x4x3xf32>}>>

// normalize with one mean and std per channel: the channel dim stays last.
// CHECK-LABEL: sluice.pipeline @normalize_per_channel
// CHECK-NEXT:    sluice.source
// CHECK-NEXT:    sluice.batch
// CHECK-NEXT:    sluice.element "normalize"{{.*}} -> !sluice.stream<!sluice.record<{image: tensor<?x4x4x3xf32>}>>
sluice.pipeline @normalize_per_channel seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "npy" {files = "*.npy"} : !rgb
  // expected-remark@+1 {{moved 'normalize' after 'batch'}}
  %1 = sluice.element "normalize"(%0) {field = "image", mean = [1.0, 2.0, 3.0], std = [4.0, 5.0, 6.0]} : !rgb -> !rgbf
  %2 = sluice.batch %1 {size = 2} : !rgbf -> !brgbf
  sluice.output %2 : !brgbf
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<4xf32>}>>
!b = !sluice.stream<!sluice.record<{x: tensor<?x4xf32>}>>

// A fixed schedule that caches a step's output (its own knob, else
// `default`) keeps that step in the record stream; `cache = "none"` does not.
// CHECK-LABEL: sluice.pipeline @cached
// CHECK-NEXT:    %[[SRC:.*]] = sluice.source
// CHECK-NEXT:    %[[C1:.*]] = sluice.element "clamp"(%[[SRC]]) {{.*}}name = "clamp.1"
// CHECK-NEXT:    %[[B:.*]] = sluice.batch %[[C1]]
// CHECK-NEXT:    %[[C2:.*]] = sluice.element "clamp"(%[[B]]) {{.*}}name = "clamp.2"
// CHECK-NEXT:    sluice.output %[[C2]]
sluice.pipeline @cached seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {default = {cache = "memory"}, "clamp.2" = {cache = "none"}} {
  %0 = sluice.source "npy" {files = "*.npy"} : !s
  %1 = sluice.element "clamp"(%0) {field = "x", min = 0.0} {name = "clamp.1"} : !s -> !s
  // expected-remark@+1 {{moved 'clamp.2' after 'batch'}}
  %2 = sluice.element "clamp"(%1) {field = "x", max = 1.0} {name = "clamp.2"} : !s -> !s
  %3 = sluice.batch %2 {size = 4} : !s -> !b
  sluice.output %3 : !b
}
