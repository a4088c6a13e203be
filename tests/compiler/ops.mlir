// Round trip of every op and type of the sluice dialect: the printed form
// parses back to the same IR, also from the generic op form.
// RUN: sluice-opt %s | sluice-opt | FileCheck %s
// RUN: sluice-opt %s --mlir-print-op-generic | sluice-opt | FileCheck %s

// CHECK-LABEL: sluice.pipeline @record_ops seed(42) epochs(3) budget(cores = 2, memory = 1073741824) {
sluice.pipeline @record_ops seed(42) epochs(3) budget(cores = 2, memory = 1073741824) {
  // CHECK-NEXT: %image_folder = sluice.source "image_folder" {extensions = ["jpg", "png"], root = "data/train"} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  %0 = sluice.source "image_folder" {root = "data/train", extensions = ["jpg", "png"]}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  // CHECK-NEXT: %shard = sluice.shard %image_folder {index = 1 : i64, num_shards = 4 : i64} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  %1 = sluice.shard %0 {num_shards = 4, index = 1}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  // Default-valued attributes are not printed.
  // CHECK-NEXT: %interleave = sluice.interleave %shard {cycle_length = 2 : i64} : !sluice.stream<
  %2 = sluice.interleave %1 {cycle_length = 2, block_length = 1}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  // CHECK-NEXT: %skip = sluice.skip %interleave {count = 5 : i64} : !sluice.stream<
  %3 = sluice.skip %2 {count = 5}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  // CHECK-NEXT: %take = sluice.take %skip {count = 100 : i64} : !sluice.stream<
  %4 = sluice.take %3 {count = 100}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
  // CHECK-NEXT: %decode_image = sluice.element "decode_image"(%take) {as = "image", channels = 3, field = "data"} : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>> -> !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
  %5 = sluice.element "decode_image"(%4) {field = "data", as = "image", channels = 3}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>}>>
     -> !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
  // Parameters print as written in a spec: no `: i64`, floats in short form.
  // CHECK-NEXT: %random_resized_crop = sluice.element "random_resized_crop"(%decode_image) {field = "image", ratio = [0.75, 1.3333], scale = [0.08, 1.0], size = [32, 32]} :
  // CHECK-SAME: image: tensor<32x32x3xui8>}>>
  %6 = sluice.element "random_resized_crop"(%5) {field = "image", size = [32, 32], scale = [0.08, 1.0], ratio = [7.500000e-01 : f64, 1.3333]}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<?x?x3xui8>}>>
     -> !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>
  // CHECK-NEXT: %map = sluice.map %random_resized_crop {expr = "x * 2 + 1", field = "label"} : !sluice.stream<{{.*}}> -> !sluice.stream<{{.*}}label: tensor<i64>, image: tensor<32x32x3xui8>}>>
  %7 = sluice.map %6 {field = "label", expr = "x * 2 + 1"}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>
     -> !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>
  // CHECK-NEXT: %filter = sluice.filter %map {where = "label >= 0 and label < 1000"} : !sluice.stream<
  %8 = sluice.filter %7 {where = "label >= 0 and label < 1000"}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>
  // CHECK-NEXT: %rename = sluice.rename %filter {mapping = {label = "target"}} : !sluice.stream<{{.*}}> -> !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, target: tensor<i64>, image: tensor<32x32x3xui8>}>>
  %9 = sluice.rename %8 {mapping = {label = "target"}}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, label: tensor<i64>, image: tensor<32x32x3xui8>}>>
     -> !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, target: tensor<i64>, image: tensor<32x32x3xui8>}>>
  // CHECK-NEXT: %select = sluice.select %rename {fields = ["image", "target"]} : !sluice.stream<{{.*}}> -> !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  %10 = sluice.select %9 {fields = ["image", "target"]}
      : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>, data: tensor<!sluice.bytes>, target: tensor<i64>, image: tensor<32x32x3xui8>}>>
     -> !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  // CHECK-NEXT: %cache = sluice.cache %select {path = "/tmp/c", to = "disk"} : !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  %11 = sluice.cache %10 {to = "disk", path = "/tmp/c"}
      : !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  // CHECK-NEXT: %shuffle = sluice.shuffle %cache {buffer = 64 : i64, reshuffle_each_epoch = false} : !sluice.stream<
  %12 = sluice.shuffle %11 {buffer = 64, reshuffle_each_epoch = false}
      : !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  // CHECK-NEXT: %repeat = sluice.repeat %shuffle : !sluice.stream<
  %13 = sluice.repeat %12 : !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  // CHECK-NEXT: %batch = sluice.batch %repeat {drop_remainder = true, size = 8 : i64} : !sluice.stream<{{.*}}> -> !sluice.stream<!sluice.record<{image: tensor<8x32x32x3xui8>, target: tensor<8xi64>}>>
  %14 = sluice.batch %13 {size = 8, drop_remainder = true}
      : !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
     -> !sluice.stream<!sluice.record<{image: tensor<8x32x32x3xui8>, target: tensor<8xi64>}>>
  // CHECK-NEXT: %unbatch = sluice.unbatch %batch : !sluice.stream<{{.*}}> -> !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  %15 = sluice.unbatch %14
      : !sluice.stream<!sluice.record<{image: tensor<8x32x32x3xui8>, target: tensor<8xi64>}>>
     -> !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
  // CHECK-NEXT: %batch.2 = sluice.batch %unbatch {name = "batch.2", size = 4 : i64} : !sluice.stream<{{.*}}> -> !sluice.stream<!sluice.record<{image: tensor<?x32x32x3xui8>, target: tensor<?xi64>}>>
  %16 = sluice.batch %15 {size = 4, name = "batch.2"}
      : !sluice.stream<!sluice.record<{image: tensor<32x32x3xui8>, target: tensor<i64>}>>
     -> !sluice.stream<!sluice.record<{image: tensor<?x32x32x3xui8>, target: tensor<?xi64>}>>
  // CHECK-NEXT: %prefetch = sluice.prefetch %batch.2 {buffer = 2 : i64} : !sluice.stream<
  %17 = sluice.prefetch %16 {buffer = 2}
      : !sluice.stream<!sluice.record<{image: tensor<?x32x32x3xui8>, target: tensor<?xi64>}>>
  // CHECK-NEXT: sluice.output %prefetch : !sluice.stream<!sluice.record<{image: tensor<?x32x32x3xui8>, target: tensor<?xi64>}>>
  sluice.output %17 : !sluice.stream<!sluice.record<{image: tensor<?x32x32x3xui8>, target: tensor<?xi64>}>>
}

// Every element type, quoted field names, and a fixed schedule.
// CHECK-LABEL: sluice.pipeline @types seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {cast = {cache = "memory", parallelism = 4 : i64}, default = {prefetch = 2 : i64}} {
// CHECK-NEXT: %text_lines = sluice.source "text_lines" {files = "*.txt"} : !sluice.stream<!sluice.record<{a: tensor<ui8>, b: tensor<i8>, c: tensor<ui16>, d: tensor<i16>, e: tensor<i32>, f: tensor<i64>, g: tensor<f16>, h: tensor<f32>, i: tensor<f64>, j: tensor<i1>, k: tensor<?x!sluice.bytes>, l: tensor<2x?x!sluice.string>, "class id": tensor<7xi64>, m.n: tensor<i64>}>>
sluice.pipeline @types seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {cast = {parallelism = 4, cache = "memory"}, default = {prefetch = 2}} {
  %0 = sluice.source "text_lines" {files = "*.txt"}
      : !sluice.stream<!sluice.record<{a: tensor<ui8>, b: tensor<i8>, c: tensor<ui16>, d: tensor<i16>, e: tensor<i32>, f: tensor<i64>, g: tensor<f16>, h: tensor<f32>, i: tensor<f64>, j: tensor<i1>, k: tensor<?x!sluice.bytes>, l: tensor<2x?x!sluice.string>, "class id": tensor<7xi64>, "m.n": tensor<i64>}>>
  // CHECK-NEXT: %cast = sluice.element "cast"(%text_lines) {as = "tokens", dtype = "i64", field = "e"}
  %1 = sluice.element "cast"(%0) {field = "e", as = "tokens", dtype = "i64"}
      : !sluice.stream<!sluice.record<{a: tensor<ui8>, b: tensor<i8>, c: tensor<ui16>, d: tensor<i16>, e: tensor<i32>, f: tensor<i64>, g: tensor<f16>, h: tensor<f32>, i: tensor<f64>, j: tensor<i1>, k: tensor<?x!sluice.bytes>, l: tensor<2x?x!sluice.string>, "class id": tensor<7xi64>, "m.n": tensor<i64>}>>
     -> !sluice.stream<!sluice.record<{a: tensor<ui8>, b: tensor<i8>, c: tensor<ui16>, d: tensor<i16>, e: tensor<i32>, f: tensor<i64>, g: tensor<f16>, h: tensor<f32>, i: tensor<f64>, j: tensor<i1>, k: tensor<?x!sluice.bytes>, l: tensor<2x?x!sluice.string>, "class id": tensor<7xi64>, "m.n": tensor<i64>, tokens: tensor<i64>}>>
  // CHECK-NEXT: %padded_batch = sluice.padded_batch %cast {length = 16 : i64, pad_value = -1.000000e+00 : f64, size = 32 : i64}
  %2 = sluice.padded_batch %1 {size = 32, length = 16, pad_value = -1.0}
      : !sluice.stream<!sluice.record<{a: tensor<ui8>, b: tensor<i8>, c: tensor<ui16>, d: tensor<i16>, e: tensor<i32>, f: tensor<i64>, g: tensor<f16>, h: tensor<f32>, i: tensor<f64>, j: tensor<i1>, k: tensor<?x!sluice.bytes>, l: tensor<2x?x!sluice.string>, "class id": tensor<7xi64>, "m.n": tensor<i64>, tokens: tensor<i64>}>>
     -> !sluice.stream<!sluice.record<{a: tensor<?xui8>, b: tensor<?xi8>, c: tensor<?xui16>, d: tensor<?xi16>, e: tensor<?xi32>, f: tensor<?xi64>, g: tensor<?xf16>, h: tensor<?xf32>, i: tensor<?xf64>, j: tensor<?xi1>, k: tensor<?x16x!sluice.bytes>, l: tensor<?x2x16x!sluice.string>, "class id": tensor<?x7xi64>, "m.n": tensor<?xi64>, tokens: tensor<?xi64>}>>
  sluice.output %2 : !sluice.stream<!sluice.record<{a: tensor<?xui8>, b: tensor<?xi8>, c: tensor<?xui16>, d: tensor<?xi16>, e: tensor<?xi32>, f: tensor<?xi64>, g: tensor<?xf16>, h: tensor<?xf32>, i: tensor<?xf64>, j: tensor<?xi1>, k: tensor<?x16x!sluice.bytes>, l: tensor<?x2x16x!sluice.string>, "class id": tensor<?x7xi64>, "m.n": tensor<?xi64>, tokens: tensor<?xi64>}>>
}

// An empty record is a valid type.
// CHECK-LABEL: sluice.pipeline @empty
// CHECK: !sluice.stream<!sluice.record<{}>>
sluice.pipeline @empty seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "files" {files = "*"} : !sluice.stream<!sluice.record<{}>>
  sluice.output %0 : !sluice.stream<!sluice.record<{}>>
}
