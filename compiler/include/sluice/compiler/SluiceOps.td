//===- SluiceOps.td - Ops of the sluice dialect --------------*- tablegen -*-===//
//
// One op per step kind. Dedicated ops exist for the steps the compiler and
// runtime reason about (record ops, `map`); every other element op of the
// registry is a `sluice.element`. A dedicated op stores each registry
// parameter as an inherent attribute of the same name, so the verifier can
// hand them back to the registry's type rule unchanged.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_TD
#define SLUICE_OPS_TD

include "sluice/compiler/SluiceTypes.td"
include "sluice/compiler/SluiceInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

/// I64Attr reads back as uint64_t; counts and sizes are signed here so that a
/// negative value is caught by the verifier instead of wrapping around.
def Sluice_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
                                                  "64-bit integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

def Sluice_Stream : Type<CPred<"::llvm::isa<::sluice::ir::StreamType>($_self)">,
                         "stream of records", "::sluice::ir::StreamType">;

//===----------------------------------------------------------------------===//
// Pipeline structure
//===----------------------------------------------------------------------===//

def Sluice_PipelineOp : Sluice_Op<"pipeline", [
    Symbol, SingleBlock, IsolatedFromAbove]> {
  let summary = "A whole input pipeline";
  let description = [{
    Holds the steps of one pipeline in a single block, in dataflow order,
    ending with `sluice.output`. The attributes carry the spec's global
    settings: the `seed` every random choice derives from, the number of
    `epochs`, the `cores` (0 = all of the host) and `memory` (bytes, 0 = no
    limit) budgets, and an optional fixed `schedule` (absent = `auto`): a
    dictionary from step name (or `default`) to `{parallelism, prefetch,
    cache}`, knob by knob: a step's own entry wins over `default`, and its
    `cache = "none"` opts it out of a default cache. `schedule_auto` says
    the spec asked for `schedule: auto` in so many words (the run then
    profiles and applies the autotuner's schedule); `rank` and `world_size`
    are the spec's `distributed:` values, where written. Positions of what
    the spec wrote that the runtime's messages point at (parameter values,
    `distributed:` entries) ride in the locations (see MLIRGen.h).

    The region is an SSACFG region rather than a graph region on purpose:
    dominance then guarantees the steps form an acyclic dataflow.

    ```mlir
    sluice.pipeline @train seed(42) epochs(1) budget(cores = 0, memory = 4294967296) {
      %image_folder = sluice.source "image_folder" {root = "data/train"}
          : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>,
                                           data: tensor<!sluice.bytes>,
                                           label: tensor<i64>}>>
      %shuffle = sluice.shuffle %image_folder {buffer = 4096 : i64}
          : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>,
                                           data: tensor<!sluice.bytes>,
                                           label: tensor<i64>}>>
      sluice.output %shuffle : !sluice.stream<!sluice.record<{
          path: tensor<!sluice.string>, data: tensor<!sluice.bytes>,
          label: tensor<i64>}>>
    }
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    DefaultValuedAttr<UI64Attr, "0">:$seed,
    DefaultValuedAttr<Sluice_I64Attr, "1">:$epochs,
    DefaultValuedAttr<Sluice_I64Attr, "0">:$cores,
    DefaultValuedAttr<Sluice_I64Attr, "0">:$memory,
    OptionalAttr<DictionaryAttr>:$schedule,
    UnitAttr:$schedule_auto,
    OptionalAttr<Sluice_I64Attr>:$rank,
    OptionalAttr<Sluice_I64Attr>:$world_size);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `seed` `(` $seed `)` `epochs` `(` $epochs `)`
    `budget` `(` `cores` `=` $cores `,` `memory` `=` $memory `)`
    (`schedule` $schedule^)? attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The terminator.
    OutputOp getOutputOp();
  }];
}

def Sluice_OutputOp : Sluice_Op<"output", [Terminator, HasParent<"PipelineOp">]> {
  let summary = "The stream a pipeline delivers to the training loop";
  let description = [{
    ```mlir
    sluice.output %batch : !sluice.stream<!sluice.record<{x: tensor<128xf32>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$stream);
  let assemblyFormat = "$stream attr-dict `:` qualified(type($stream))";
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

// `custom<Params>` prints parameter dictionaries the way they were written
// in the spec: `{p = 0.5, size = [224, 224]}` rather than
// `{p = 5.000000e-01 : f64, size = [224 : i64, 224 : i64]}`; it reads back
// the same attributes (i64 and f64 are the literal defaults).

/// A step: one stream result named after it, the optional `name`
/// attribute (absent = the registry name), and a verifier that, after the
/// op's own checks, re-runs the registry type rule.
class Sluice_StepOp<string mnemonic, list<Trait> traits = []>
    : Sluice_Op<mnemonic, !listconcat(traits, [
        HasParent<"PipelineOp">,
        DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>])> {
  let results = (outs Sluice_Stream:$output);
  let hasVerifier = 1;
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      ::sluice::ir::detail::setStepResultName(getOperation(), setNameFn);
    }
  }];
}

/// A step whose output record type equals its input record type.
class Sluice_StreamOp<string mnemonic, list<Trait> traits = []>
    : Sluice_StepOp<mnemonic, !listconcat(traits, [
        SameOperandsAndResultType, Sluice_StepOpInterface])> {
  let assemblyFormat = "$input attr-dict `:` qualified(type($output))";
}

/// A step that changes the record type.
class Sluice_ReshapeOp<string mnemonic, list<Trait> traits = []>
    : Sluice_StepOp<mnemonic, !listconcat(traits, [Sluice_StepOpInterface])> {
  let assemblyFormat = [{
    $input attr-dict `:` qualified(type($input)) `->` qualified(type($output))
  }];
}

def Sluice_SourceOp : Sluice_StepOp<"source", [
    DeclareOpInterfaceMethods<Sluice_StepOpInterface,
                              ["getRegistryName", "getRegistryParams"]>]> {
  let summary = "Reads records from files";
  let description = [{
    `kind` names a source of the op registry (`image_folder`, `csv`, `idx`,
    `tfrecord`, ...), `params` are its parameters exactly as the registry
    defines them. The result type is the record type the front end inferred
    when it checked the spec; the verifier does not re-run the source's type
    rule because that can depend on the files (an `npy` header, a CSV
    header), and the IR must stay valid when the data moves.

    ```mlir
    %idx = sluice.source "idx" {images = "train-images-idx3-ubyte.gz",
                                labels = "train-labels-idx1-ubyte.gz"}
        : !sluice.stream<!sluice.record<{image: tensor<28x28xui8>, label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins StrAttr:$kind, DictionaryAttr:$params,
                   OptionalAttr<StrAttr>:$name);
  let assemblyFormat = [{
    $kind custom<Params>($params) attr-dict `:` qualified(type($output))
  }];
}

def Sluice_ElementOp : Sluice_StepOp<"element", [
    DeclareOpInterfaceMethods<Sluice_StepOpInterface,
                              ["getRegistryName", "getRegistryParams"]>]> {
  let summary = "Any element op of the registry";
  let description = [{
    Applies the registry element op `kind` (one record in, one record out)
    with `params`. The verifier validates `params` against the registry's
    parameter specs, runs the op's type rule on the input record type, and
    requires the result type to be exactly the inferred one, so every type
    invariant of every registry op (e.g. a static crop no larger than its
    input) is checked without a dedicated op.

    ```mlir
    %decode_image = sluice.element "decode_image"(%src)
        {as = "image", channels = 3, field = "data"}
        : !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>}>>
       -> !sluice.stream<!sluice.record<{data: tensor<!sluice.bytes>,
                                         image: tensor<?x?x3xui8>}>>
    ```
  }];
  let arguments = (ins StrAttr:$kind, Sluice_Stream:$input,
                   DictionaryAttr:$params, OptionalAttr<StrAttr>:$name);
  let assemblyFormat = [{
    $kind `(` $input `)` custom<Params>($params) attr-dict `:`
    qualified(type($input)) `->`
    qualified(type($output))
  }];
}

def Sluice_MapOp : Sluice_ReshapeOp<"map"> {
  let summary = "Applies an expression to every value of a field";
  let description = [{
    `expr` is written in the expression language of ops/Expr.h with `x`
    standing for one value of `field`; the result replaces the field, or is
    stored as field `as` when given. The element type follows the
    expression's type rules, or is `dtype` when given.

    ```mlir
    %map = sluice.map %in {expr = "log(max(x, 0) + 1)", field = "dense"}
        : !sluice.stream<!sluice.record<{dense: tensor<13xf32>}>>
       -> !sluice.stream<!sluice.record<{dense: tensor<13xf32>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, StrAttr:$field, StrAttr:$expr,
                   OptionalAttr<StrAttr>:$as, OptionalAttr<StrAttr>:$dtype,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_FilterOp : Sluice_StreamOp<"filter"> {
  let summary = "Keeps the records for which a predicate holds";
  let description = [{
    `where` is a boolean expression over the record's fields.

    ```mlir
    %filter = sluice.filter %in {where = "label >= 0"}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, StrAttr:$where,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_SelectOp : Sluice_ReshapeOp<"select"> {
  let summary = "Keeps the listed fields, in the listed order";
  let description = [{
    ```mlir
    %select = sluice.select %in {fields = ["image", "label"]}
        : !sluice.stream<!sluice.record<{path: tensor<!sluice.string>,
                                         image: tensor<3x224x224xf32>,
                                         label: tensor<i64>}>>
       -> !sluice.stream<!sluice.record<{image: tensor<3x224x224xf32>,
                                         label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, StrArrayAttr:$fields,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_RenameOp : Sluice_ReshapeOp<"rename"> {
  let summary = "Renames fields";
  let description = [{
    `mapping` maps old names to new names, all at once (so two fields can
    swap names); fields keep their positions.

    ```mlir
    %rename = sluice.rename %in {mapping = {label = "target"}}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
       -> !sluice.stream<!sluice.record<{target: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, DictionaryAttr:$mapping,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_ShuffleOp : Sluice_StreamOp<"shuffle"> {
  let summary = "Shuffles records through a buffer";
  let description = [{
    Keeps `buffer` records and emits a random one of them as each new record
    arrives; a buffer of 1 keeps the order. The order differs per epoch
    unless `reshuffle_each_epoch` is false.

    ```mlir
    %shuffle = sluice.shuffle %in {buffer = 4096 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, Sluice_I64Attr:$buffer,
                   DefaultValuedAttr<BoolAttr, "true">:$reshuffle_each_epoch,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_BatchOp : Sluice_ReshapeOp<"batch"> {
  let summary = "Stacks consecutive records";
  let description = [{
    Every field gains a leading dimension: `size` when `drop_remainder` is
    set (the last partial batch is dropped), `?` otherwise. All fields must
    have static shapes or the same shape in every record of a batch.

    ```mlir
    %batch = sluice.batch %in {drop_remainder = true, size = 128 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
       -> !sluice.stream<!sluice.record<{label: tensor<128xi64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, Sluice_I64Attr:$size,
                   DefaultValuedAttr<BoolAttr, "false">:$drop_remainder,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_PaddedBatchOp : Sluice_ReshapeOp<"padded_batch"> {
  let summary = "Stacks consecutive records, padding variable dimensions";
  let description = [{
    Like `sluice.batch`, but fields with dynamic dimensions are padded with
    `pad_value` up to `length` (or to the longest record of the batch).

    ```mlir
    %padded_batch = sluice.padded_batch %in {length = 64 : i64, size = 32 : i64}
        : !sluice.stream<!sluice.record<{tokens: tensor<?xi32>}>>
       -> !sluice.stream<!sluice.record<{tokens: tensor<?x64xi32>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, Sluice_I64Attr:$size,
                   OptionalAttr<Sluice_I64Attr>:$length,
                   DefaultValuedAttr<F64Attr, "0.0">:$pad_value,
                   DefaultValuedAttr<BoolAttr, "false">:$drop_remainder,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_UnbatchOp : Sluice_ReshapeOp<"unbatch"> {
  let summary = "Splits records along their leading dimension";
  let description = [{
    ```mlir
    %unbatch = sluice.unbatch %in
        : !sluice.stream<!sluice.record<{label: tensor<128xi64>}>>
       -> !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, OptionalAttr<StrAttr>:$name);
}

def Sluice_RepeatOp : Sluice_StreamOp<"repeat"> {
  let summary = "Replays the stream";
  let description = [{
    Emits the input `count` times; without `count`, forever.

    ```mlir
    %repeat = sluice.repeat %in {count = 2 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input,
                   OptionalAttr<Sluice_I64Attr>:$count,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_TakeOp : Sluice_StreamOp<"take"> {
  let summary = "Keeps the first `count` records";
  let description = [{
    ```mlir
    %take = sluice.take %in {count = 1000 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, Sluice_I64Attr:$count,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_SkipOp : Sluice_StreamOp<"skip"> {
  let summary = "Drops the first `count` records";
  let description = [{
    ```mlir
    %skip = sluice.skip %in {count = 10 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, Sluice_I64Attr:$count,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_ShardOp : Sluice_StreamOp<"shard"> {
  let summary = "Keeps every `num_shards`-th record, starting at `index`";
  let description = [{
    ```mlir
    %shard = sluice.shard %in {index = 1 : i64, num_shards = 8 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input, Sluice_I64Attr:$num_shards,
                   Sluice_I64Attr:$index, OptionalAttr<StrAttr>:$name);
}

def Sluice_InterleaveOp : Sluice_StreamOp<"interleave"> {
  let summary = "Reads several input files at once, alternating records";
  let description = [{
    Opens `cycle_length` of the source's files together and takes
    `block_length` consecutive records from each in turn.

    ```mlir
    %interleave = sluice.interleave %in {block_length = 1 : i64, cycle_length = 4 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input,
                   DefaultValuedAttr<Sluice_I64Attr, "4">:$cycle_length,
                   DefaultValuedAttr<Sluice_I64Attr, "1">:$block_length,
                   OptionalAttr<StrAttr>:$name);
}

def Sluice_CacheOp : Sluice_StreamOp<"cache"> {
  let summary = "Materializes the stream after its first pass";
  let description = [{
    The first epoch records what passes by, in memory or in a file under
    `path`; later epochs replay it instead of recomputing the steps above.

    ```mlir
    %cache = sluice.cache %in {to = "memory"}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input,
                   DefaultValuedAttr<StrAttr, "\"memory\"">:$to,
                   OptionalAttr<StrAttr>:$path, OptionalAttr<StrAttr>:$name);
}

def Sluice_PrefetchOp : Sluice_StreamOp<"prefetch"> {
  let summary = "Computes records ahead of the consumer";
  let description = [{
    Decouples the steps above from the consumer with a queue of `buffer`
    records; 0 means no queue at all, and without `buffer` the autotuner
    picks the depth.

    ```mlir
    %prefetch = sluice.prefetch %in {buffer = 2 : i64}
        : !sluice.stream<!sluice.record<{label: tensor<i64>}>>
    ```
  }];
  let arguments = (ins Sluice_Stream:$input,
                   OptionalAttr<Sluice_I64Attr>:$buffer,
                   OptionalAttr<StrAttr>:$name);
}

#endif // SLUICE_OPS_TD
