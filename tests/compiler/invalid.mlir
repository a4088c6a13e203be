// Every verifier of the sluice dialect rejects what it should, with a message
// that says what is wrong.
// RUN: sluice-opt %s -split-input-file -verify-diagnostics

// expected-error@+1 {{record field 'x' appears twice}}
!r = !sluice.record<{x: tensor<i64>, x: tensor<f32>}>

// -----

// expected-error@+1 {{record field 'x' has type 'i64'; fields are ranked tensors of ui8, i8, ui16, i16, i32, i64, f16, f32, f64, i1, !sluice.bytes or !sluice.string}}
!r = !sluice.record<{x: i64}>

// -----

// expected-error@+1 {{record field 'x' has type 'tensor<si8>'}}
!r = !sluice.record<{x: tensor<si8>}>

// -----

// expected-error@+1 {{record field 'x' has type 'tensor<*xf32>'}}
!r = !sluice.record<{x: tensor<*xf32>}>

// -----

// expected-error@+1 {{record field names must not be empty}}
!r = !sluice.record<{"": tensor<f32>}>

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
// expected-error@+1 {{epochs must be >= 1, got 0}}
sluice.pipeline @p seed(0) epochs(0) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
// expected-error@+1 {{budget cores must be >= 0 (0 = all), got -2}}
sluice.pipeline @p seed(0) epochs(1) budget(cores = -2, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
// expected-error@+1 {{budget memory must be >= 0 bytes (0 = no limit), got -1}}
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = -1) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
// expected-error@+1 {{schedule of 'text_lines': bad setting parallelism = 0 : i64}}
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {text_lines = {parallelism = 0}} {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
// expected-error@+1 {{schedule of 'text_lines': bad setting cache = "cloud"}}
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) schedule {text_lines = {cache = "cloud"}} {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{step name 'text_lines' is already used by an earlier stage}}
  %1 = sluice.skip %0 {count = 1, name = "text_lines"} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-error@+1 {{output stream must have exactly one consumer, it has 2}}
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  %1 = sluice.skip %0 {count = 1} : !s
  %2 = sluice.take %0 {count = 1} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
func.func @f(%s: !s) {
  // expected-error@+1 {{'sluice.skip' op expects parent op 'sluice.pipeline'}}
  %0 = sluice.skip %s {count = 1} : !s
  return
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-error@+1 {{'text_line' is not in the op registry; did you mean 'text_lines'?}}
  %0 = sluice.source "text_line" {files = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-error@+1 {{'decode_image' is not a source}}
  %0 = sluice.source "decode_image" {field = "x"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  // expected-error@+2 {{'text_lines' has no parameter 'file'; did you mean 'files'?}}
  // expected-error@+1 {{'text_lines' is missing required parameter 'files'}}
  %0 = sluice.source "text_lines" {file = "*.txt"} : !s
  sluice.output %0 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{'sluice.element' op 'batch' is a record op; sluice.element holds element ops only}}
  %1 = sluice.element "batch"(%0) {size = 2} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{'decode_imag' is not in the op registry; did you mean 'decode_image'?}}
  %1 = sluice.element "decode_imag"(%0) {field = "x"} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{parameter 'dtype' of 'cast' must be an element type (u8, i32, i64, f32, ...)}}
  %1 = sluice.element "cast"(%0) {field = "x", dtype = 3} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{parameter 'field' of 'cast' names no field of the input record: 'y' (fields: x)}}
  %1 = sluice.element "cast"(%0) {field = "y", dtype = "f32"} : !s -> !s
  sluice.output %1 : !s
}

// -----

// The registry's type rule runs on the input record: a static crop larger
// than the image is caught without a dedicated op.
!in = !sluice.stream<!sluice.record<{image: tensor<28x28x1xui8>}>>
!out = !sluice.stream<!sluice.record<{image: tensor<32x32x1xui8>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "idx" {images = "i.gz", labels = "l.gz"} : !in
  // expected-error@+2 {{'center_crop': crop 32x32 is larger than the image 28x28}}
  // expected-note@+1 {{resize it first}}
  %1 = sluice.element "center_crop"(%0) {field = "image", size = [32, 32]} : !in -> !out
  sluice.output %1 : !out
}

// -----

!in = !sluice.stream<!sluice.record<{x: tensor<i64>}>>
!out = !sluice.stream<!sluice.record<{x: tensor<f64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !in
  // expected-error@+1 {{result record type does not match what 'cast' produces: declared {x: f64}, inferred {x: f32}}}
  %1 = sluice.element "cast"(%0) {field = "x", dtype = "f32"} : !in -> !out
  sluice.output %1 : !out
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{expression "log(x" does not parse}}
  %1 = sluice.map %0 {field = "x", expr = "log(x"} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{field 'y' is not in the input record (fields: x)}}
  %1 = sluice.map %0 {field = "y", expr = "x + 1"} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+2 {{'map': unknown name 'y'; did you mean 'x'?}}
  // expected-note@+1 {{other fields are not visible}}
  %1 = sluice.map %0 {field = "x", expr = "y + 1"} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{predicate "x >" does not parse}}
  %1 = sluice.filter %0 {where = "x >"} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+2 {{'filter': filter needs a condition (a bool)}}
  // expected-note@+1 {{compare it}}
  %1 = sluice.filter %0 {where = "x + 1"} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{must keep at least one field}}
  %1 = sluice.select %0 {fields = []} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{field 'x' is selected twice}}
  %1 = sluice.select %0 {fields = ["x", "x"]} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{field 'z' is not in the input record (fields: x, y)}}
  %1 = sluice.select %0 {fields = ["z"]} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{result record must be the selected fields in the listed order: '!sluice.record<{y: tensor<i64>, x: tensor<f32>}>'}}
  %1 = sluice.select %0 {fields = ["y", "x"]} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{field 'z' is not in the input record (fields: x, y)}}
  %1 = sluice.rename %0 {mapping = {z = "w"}} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>, y: tensor<i64>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{'rename': both 'x' and 'y' are renamed to 'z'}}
  %1 = sluice.rename %0 {mapping = {x = "z", y = "z"}} : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{buffer must be > 0 records, got 0}}
  %1 = sluice.shuffle %0 {buffer = 0} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{batch size must be > 0, got 0}}
  %1 = sluice.batch %0 {size = 0} : !s -> !s
  sluice.output %1 : !s
}

// -----

!in = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
!out = !sluice.stream<!sluice.record<{x: tensor<?xf32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !in
  // expected-error@+1 {{result record must be the input with a leading 16 on every field: '!sluice.record<{x: tensor<16xf32>}>'}}
  %1 = sluice.batch %0 {size = 16, drop_remainder = true} : !in -> !out
  sluice.output %1 : !out
}

// -----

!in = !sluice.stream<!sluice.record<{x: tensor<?xf32>}>>
!out = !sluice.stream<!sluice.record<{x: tensor<?x?xf32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !in
  // expected-error@+2 {{'batch': cannot batch field 'x' of type f32[?]: its shape varies between records}}
  // expected-note@+1 {{padded_batch}}
  %1 = sluice.batch %0 {size = 16} : !in -> !out
  sluice.output %1 : !out
}

// -----

!in = !sluice.stream<!sluice.record<{x: tensor<?xf32>}>>
!out = !sluice.stream<!sluice.record<{x: tensor<?x?xf32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !in
  // expected-error@+1 {{padded length must be > 0, got 0}}
  %1 = sluice.padded_batch %0 {size = 16, length = 0} : !in -> !out
  sluice.output %1 : !out
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{field 'x' is a scalar; every field needs a leading dimension to unbatch}}
  %1 = sluice.unbatch %0 : !s -> !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{count must be > 0 (omit it to repeat forever), got 0}}
  %1 = sluice.repeat %0 {count = 0} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{count must be >= 0, got -1}}
  %1 = sluice.take %0 {count = -1} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{count must be >= 0, got -3}}
  %1 = sluice.skip %0 {count = -3} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{shard index must be in [0, 4), got 4}}
  %1 = sluice.shard %0 {num_shards = 4, index = 4} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{num_shards must be > 0, got 0}}
  %1 = sluice.shard %0 {num_shards = 0, index = 0} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{cycle_length must be > 0, got 0}}
  %1 = sluice.interleave %0 {cycle_length = 0} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{cache must go to "memory" or "disk", got "cloud"}}
  %1 = sluice.cache %0 {to = "cloud"} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+2 {{'cache': path is only used with `to: disk`}}
  // expected-note@+1 {{add `to: disk`, or drop `path`}}
  %1 = sluice.cache %0 {path = "/tmp/x"} : !s
  sluice.output %1 : !s
}

// -----

!s = !sluice.stream<!sluice.record<{x: tensor<f32>}>>
sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {
  %0 = sluice.source "text_lines" {files = "*.txt"} : !s
  // expected-error@+1 {{buffer must be >= 0 records, got -1}}
  %1 = sluice.prefetch %0 {buffer = -1} : !s
  sluice.output %1 : !s
}
