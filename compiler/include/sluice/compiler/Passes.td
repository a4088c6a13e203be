//===- Passes.td - Graph passes over the sluice dialect ------*- tablegen -*-===//
//
// Adding a pass: an entry here, one .cpp in compiler/lib/Transforms, a lit
// test tests/compiler/<cli-name>.mlir, and one line in compiler/CMakeLists.txt
// plus the list in Compiler.cpp that orders the graph passes.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_PASSES_TD
#define SLUICE_PASSES_TD

include "mlir/Pass/PassBase.td"

def EliminateNoops : Pass<"sluice-eliminate-noops"> {
  let summary = "Removes stages that provably do nothing";
  let description = [{
    Deletes stages whose output stream equals their input stream: `select`
    of every field in the existing order, `rename` of nothing (or of fields to
    themselves), `skip` of 0 records, `repeat` once, `shuffle` with a buffer
    of 1, `shard` into 1 shard, `prefetch` of 0 records, a `cast` to the
    element type the field already has, and a `transpose` whose permutation
    is the identity. With `remarks=true` every removal is reported as a
    remark at the stage's location (its line in the spec).

    ```mlir
    // before
    %skip = sluice.skip %in {count = 0 : i64} : !sluice.stream<...>
    sluice.output %skip : !sluice.stream<...>
    // after
    sluice.output %in : !sluice.stream<...>
    ```
  }];
  let statistics = [
    Statistic<"numRemoved", "removed-stages", "Number of stages removed">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every removed stage as a remark">,
  ];
}

def FuseMapBatch : Pass<"sluice-fuse-map-batch"> {
  let summary = "Moves value-wise steps before a batch to after it";
  let description = [{
    A step that computes every output value from the input value at the
    same position alone gives the same bytes whether it runs on each record
    or once on the batch of them: f(batch(r1, ..., rB)) == batch(f(r1), ...,
    f(rB)). Running it after the batch replaces B small kernel calls (and B
    allocations) by one on a [B, ...] tensor. The steps right before a
    `sluice.batch` that are `fill_missing`, `map`, `clamp`, `cast`,
    `bucketize`, `hash_bucket` or `normalize` (per channel along the last
    dim, which batching leaves in place; a static last dim when the lists
    are per channel) move after it, in their order; result types are
    recomputed by the registry type rules. Steps before `padded_batch` stay
    (the padding would be transformed), as do random ops, `one_hot` (its
    out-of-range ids are per-record data errors) and anything that looks at
    shapes. With `remarks=true` every move is reported at the step.

    ```mlir
    // before
    %map = sluice.map %in {expr = "x * 2", field = "x"} : ... -> ...
    %batch = sluice.batch %map {size = 64 : i64} : ... -> ...
    // after
    %batch = sluice.batch %in {size = 64 : i64} : ... -> ...
    %map = sluice.map %batch {expr = "x * 2", field = "x"} : ... -> ...
    ```
  }];
  let statistics = [
    Statistic<"numMoved", "moved-steps", "Number of steps moved after a batch">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every moved step as a remark">,
  ];
}

def FuseDecodeCrop : Pass<"sluice-fuse-decode-crop"> {
  let summary = "Fuses decode_image and random_resized_crop into one step "
                "that decodes only the crop box";
  let description = [{
    Replaces `decode_image` immediately followed by a `random_resized_crop`
    of the decoded field with one `decode_random_resized_crop` element op
    (an internal registry op). The fused op reads the JPEG header, draws
    the box from the crop step's random stream (`crop_step`), and decodes
    only the box with libjpeg's crop/skip-scanline API: the same pixels and
    random draws as the two steps, with less decode work; by default the
    decode stops after the box's last row (decode_image's `verify`, which
    decides whether damage below the box is noticed). Its location fuses
    the decode's and the crop's, the decode's first (data errors are the
    decode's). Not fused when the crop has its own `as` (the full image would
    stay visible downstream) or when a fixed schedule names either step.
    With `remarks=true` every fusion, and every pair left alone, is reported.

    ```mlir
    // before
    %1 = sluice.element "decode_image"(%0) {as = "image", channels = 3,
        field = "data"} : !s0 -> !s1
    %2 = sluice.element "random_resized_crop"(%1) {field = "image",
        size = [224, 224], ...} : !s1 -> !s2
    // after
    %2 = sluice.element "decode_random_resized_crop"(%0) {as = "image",
        channels = 3, crop_step = "random_resized_crop", field = "data",
        size = [224, 224], ...} {name = "decode_image+random_resized_crop"}
        : !s0 -> !s2
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-stages", "Number of decode + crop pairs fused">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every fusion and every pair not fused as a remark">,
  ];
}

def FuseCropEpilogue : Pass<"sluice-fuse-crop-epilogue"> {
  let summary = "Folds flip, normalize and a CHW transpose into the fused "
                "decode + crop";
  let description = [{
    After sluice-fuse-decode-crop, folds the `random_flip` (axis width),
    `normalize` and `transpose` to CHW steps that directly follow a
    `decode_random_resized_crop` on its image field, without `as`, into it
    (as its `flip_step`/`flip_p`, `mean`/`std` and `layout` parameters):
    the resize then writes mirrored, normalized CHW floats as it produces
    each output row instead of three more passes and allocations per image.
    Flip and normalize may come in either order; the transpose must come
    last. The flip is drawn from the flip step's random stream and the
    pixels go through normalize's exact float expression, so the output
    bytes equal the unfused steps'. Not folded when a fixed schedule names
    a step. With `remarks=true` every fold, and the step that stopped one,
    is reported.

    With `leave-to-codegen=true` (what `sluice run` and `sluice compile`
    ask for when the code generator is on) an epilogue that
    sluice-fuse-remaps makes one generated kernel (two or more steps with a
    flip or a transpose among them, or a lone `normalize`) is left alone:
    the resize writes the u8 crop and the generated kernel writes the
    mirrored, normalized CHW floats straight into the batch row, faster than
    the hand-written row code. The hand-written fold stays the path of
    `--no-jit` and of a run with the generated epilogue turned off.

    ```mlir
    // before
    %2 = sluice.element "decode_random_resized_crop"(%0) {...} : !s0 -> !s2
    %3 = sluice.element "random_flip"(%2) {field = "image"} : !s2 -> !s2
    %4 = sluice.element "normalize"(%3) {field = "image", mean = [...],
        std = [...]} : !s2 -> !s4
    %5 = sluice.element "transpose"(%4) {field = "image", to = "CHW"}
        : !s4 -> !s5
    // after
    %5 = sluice.element "decode_random_resized_crop"(%0) {...,
        flip_step = "random_flip", layout = "CHW", mean = [...], std = [...]}
        {name = "decode_image+random_resized_crop+random_flip+normalize+transpose"}
        : !s0 -> !s5
    ```
  }];
  let statistics = [
    Statistic<"numFolded", "folded-steps", "Number of steps folded into a crop">,
    Statistic<"numLeft", "left-steps",
              "Number of epilogue steps left to the generated kernel">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every fold and every step not folded as a remark">,
    Option<"leaveToCodegen", "leave-to-codegen", "bool", /*default=*/"false",
           "Leave an epilogue sluice-fuse-remaps makes one generated kernel "
           "unfolded (the code generator is on)">,
  ];
}

def HoistShuffle : Pass<"sluice-hoist-shuffle"> {
  let summary = "Moves each shuffle toward the source, to where its records "
                "are smallest";
  let description = [{
    A `sluice.shuffle` written after the decode and augmentation steps buffers
    decoded (often f32) records: hundreds of KiB each instead of the encoded
    bytes, and the batch after it copies each one on one thread. The pass
    moves the shuffle up past the steps before it that look at one record at
    a time and give exactly one record for it (the op registry's traits:
    `perRecord`, `OneToOne`, random draws keyed by the record's source
    position, not by its place in the stream), and past `prefetch`, to the
    point among those where the estimated record is smallest (static shapes
    count exactly; a dynamic field is estimated from the registry's output
    size hints), usually right after the source.

    Why the output is byte-identical: the shuffle's choices depend only on
    how many records reach it and in which order, and each crossed step
    neither drops nor reorders records; every random step draws from (seed,
    epoch, record's source index, step), which the shuffle keeps with the
    record. A step that may raise a data error (a corrupt image) is crossed
    only under the source's `on_error: fail`: under `skip` it can drop a
    record, which would change what the shuffle counts. Never crossed:
    filters, batches, take/skip/shard, repeat, interleave, cache, another
    shuffle, and a step whose output a fixed schedule caches. With
    `remarks=true` every move, and every shuffle left where it is, is
    reported at the shuffle.

    ```mlir
    // before
    %1 = sluice.element "decode_image"(%0) {as = "image", field = "data"}
        : !s0 -> !s1
    %2 = sluice.select %1 {fields = ["image", "label"]} : !s1 -> !s2
    %3 = sluice.shuffle %2 {buffer = 4096 : i64} : !s2
    // after
    %1 = sluice.shuffle %0 {buffer = 4096 : i64} : !s0
    %2 = sluice.element "decode_image"(%1) {as = "image", field = "data"}
        : !s0 -> !s1
    %3 = sluice.select %2 {fields = ["image", "label"]} : !s1 -> !s2
    ```
  }];
  let statistics = [
    Statistic<"numMoved", "crossed-steps", "Number of steps shuffles moved before">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every moved shuffle, and every one left in place, as a "
           "remark">,
  ];
}

def PushFilters : Pass<"sluice-push-filters"> {
  let summary = "Moves each filter before the element steps it does not "
                "depend on";
  let description = [{
    A `sluice.filter` moves up past element steps (and `select`) that do not
    write a field its predicate reads, so a cheap predicate runs before an
    expensive decode and the records it drops are never decoded. It never
    crosses a record op that counts, reorders, groups or renames records
    (shuffle, batch, padded_batch, unbatch, take, skip, shard, repeat,
    cache, interleave, prefetch, rename, filter), nor a step whose output a
    fixed schedule caches. Random steps are crossed: their draws derive from
    (seed, epoch, record index, step) and the record index is the position
    in the source, which filters do not change, so every surviving record
    gets the same draws. A record the moved filter drops is no longer seen
    by the crossed steps: a data error they would have raised on it is not
    reported (it counts as filtered). With `remarks=true` every move is
    reported at the filter.

    ```mlir
    // before
    %1 = sluice.element "decode_image"(%0) {as = "image", field = "data"}
        : !s0 -> !s1
    %2 = sluice.filter %1 {where = "label != 3"} : !s1
    // after
    %1 = sluice.filter %0 {where = "label != 3"} : !s0
    %2 = sluice.element "decode_image"(%1) {as = "image", field = "data"}
        : !s0 -> !s1
    ```
  }];
  let statistics = [
    Statistic<"numMoved", "crossed-steps", "Number of steps filters moved before">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every moved filter as a remark">,
  ];
}

def PushProjections : Pass<"sluice-push-projections"> {
  let summary = "Never produces fields nobody downstream reads";
  let description = [{
    Computes, from `sluice.output` back to the source, the fields each
    stage's output must carry (the output's fields, filter predicates, the
    `field` each element step reads). Element steps whose result nobody
    reads are removed (a `decode_image` whose image a `select` drops is never
    run), `select` lists and `rename` mappings lose fields that no longer
    exist, a csv/tsv source gets `read` (the other columns are counted but
    never converted or checked), and a tfrecord source keeps only the
    `features` read downstream (the others are skipped unparsed). Types are
    re-inferred by the registry rules. Outputs stay byte-identical, except
    that data errors in values nobody reads are not found (see docs/ops.md,
    `select`). With `remarks=true` every change is reported.

    ```mlir
    // before
    %0 = sluice.source "csv" {columns = [{name = "a", type = "f32"},
        {name = "b", type = "f32"} ], files = "x.csv"} : !sluice.stream<
        !sluice.record<{a: tensor<f32>, b: tensor<f32>}>>
    %1 = sluice.select %0 {fields = ["a"]} : ... -> ...
    // after
    %0 = sluice.source "csv" {columns = [...], files = "x.csv", read = ["a"]}
        : !sluice.stream<!sluice.record<{a: tensor<f32>}>>
    %1 = sluice.select %0 {fields = ["a"]} : ... -> ...
    ```
  }];
  let statistics = [
    Statistic<"numRemoved", "removed-steps", "Number of steps removed">,
    Statistic<"numPruned", "pruned-sources", "Number of sources told to skip fields">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every removed step and pruned source as a remark">,
  ];
}

def FuseMaps : Pass<"sluice-fuse-maps"> {
  let summary = "Groups consecutive value-wise steps into one fused stage";
  let description = [{
    Marks every run of two or more consecutive `fill_missing`, `clamp`,
    `cast`, `normalize`, `hash_bucket`, `bucketize` and `map` steps (per
    record, or per batch after sluice-fuse-map-batch moved them there) as
    one fused stage: each op of the run gets `sluice.fused = "a+b+c"`, the
    run's step names joined by '+' (the convention of fused step names, so
    errors and statistics name the steps). PlanGen turns the run into one runtime stage of op
    `fused_map` that keeps the steps, and the code generator compiles one
    kernel per field the run touches: each field's values are read once,
    go through all of its steps in registers and are written once. A
    `normalize` takes each value's channel (its last index) from the
    value's position in the loop, so a per-channel normalize fuses too,
    before or after the other steps; a record whose last dim is not the
    mean/std lists' length takes the unfused steps, which report it. Without
    the code generator the runtime runs the kept steps one after another,
    with the same bytes. A step with its own `as` (it leaves its input in
    the record) ends a run, as do random ops and steps a fixed schedule
    names (the fused stage has a new name). With `remarks=true` every fused
    run is reported at its first step.

    ```mlir
    // before
    %1 = sluice.element "fill_missing"(%0) {field = "dense", value = 0.0} : !s -> !s
    %2 = sluice.map %1 {expr = "log(max(x, 0) + 1)", field = "dense"} : !s -> !s
    // after
    %1 = sluice.element "fill_missing"(%0) {field = "dense", value = 0.0}
        {sluice.fused = "fill_missing+map"} : !s -> !s
    %2 = sluice.map %1 {expr = "log(max(x, 0) + 1)", field = "dense"}
        {sluice.fused = "fill_missing+map"} : !s -> !s
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-steps", "Number of steps put into a fused stage">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every fused run as a remark">,
  ];
}

def FuseRemaps : Pass<"sluice-fuse-remaps"> {
  let summary = "Groups crop/flip/transpose/pad runs with the value-wise "
                "steps around them into one kernel";
  let description = [{
    Marks every run of two or more consecutive steps on one field, at least
    one of which only moves values (`center_crop`, `random_crop`,
    `random_flip`, `transpose`, `pad`), the others value-wise (`cast`,
    `normalize`, `clamp`, `fill_missing`, `map`, `hash_bucket`,
    `bucketize`), as one fused stage
    (`sluice.fused = "a+b+c"`, as sluice-fuse-maps does; PlanGen makes it one
    `fused_map` runtime stage keeping the steps). The code generator
    compiles the run to one kernel: each output value is read from the input
    position the composed index maps give (or is a pad value), then goes
    through the value steps in registers. The image's size, the crop offsets
    and the flip decision are kernel arguments the runtime fills per record
    from the random streams of the unfused steps, so one kernel serves every
    record and the draws and bytes do not change. Without the code generator
    the runtime runs the kept steps one after another. A step with its own
    `as`, a step on another field, one a fixed schedule names, or any other
    op ends a run. Runs before sluice-fuse-maps, which leaves marked steps
    alone. With `remarks=true` every fused run is reported at its first step.

    ```mlir
    // before
    %1 = sluice.element "random_crop"(%0) {field = "image", padding = 2, size = [28, 28]} : !s -> !s
    %2 = sluice.element "normalize"(%1) {field = "image", mean = [72.94], std = [90.02]} : !s -> !t
    // after
    %1 = sluice.element "random_crop"(%0) {field = "image", padding = 2, size = [28, 28]}
        {sluice.fused = "random_crop+normalize"} : !s -> !s
    %2 = sluice.element "normalize"(%1) {field = "image", mean = [72.94], std = [90.02]}
        {sluice.fused = "random_crop+normalize"} : !s -> !t
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-steps", "Number of steps put into a remap kernel">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every fused run as a remark">,
  ];
}

#endif // SLUICE_PASSES_TD
