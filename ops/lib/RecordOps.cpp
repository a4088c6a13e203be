//===- RecordOps.cpp - Registry entries of the record (stream) ops --------===//
//
// Ops that work on the stream rather than on one field: projection,
// renaming, filtering, ordering, batching and buffering. Their type rules
// are mostly about names and leading dims; batch is where varying image
// sizes are caught before they become a run-time failure.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"
#include "OpHelpers.h"

#include "sluice/ops/kernels/ExprEval.h"

#include <map>
#include <memory>
#include <set>

namespace sluice {
namespace {

using namespace detail;

TypeRule sameType() {
  return [](TypeContext &ctx) { return ctx.input(); };
}

std::string didYouMean(const std::string &word,
                       const std::vector<std::string> &candidates) {
  std::string best = closestMatch(word, candidates);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

std::string fieldList(const RecordType &t) {
  std::string s;
  for (const Field &f : t.fields())
    s += (s.empty() ? "" : ", ") + f.name;
  return s;
}

//===----------------------------------------------------------------------===//
// select, rename, filter
//===----------------------------------------------------------------------===//

OpDef select() {
  OpDef op = record("select");
  op.traits.perRecord = true;
  op.traits.count = Cardinality::OneToOne;
  op.summary = "Keeps the listed fields, in that order.";
  op.doc =
      "Fields nobody reads after the `select` are never produced: the "
      "compiler (sluice-push-projections) pushes the projection toward the "
      "source. A csv/tsv source then converts only the columns read (the "
      "others are split and counted, so a line with the wrong number of "
      "cells is still an error), a tfrecord source parses only the features "
      "read, and an element step whose result is dropped is not run at all "
      "(`decode_image` of an image whose `label` alone survives is never "
      "decoded).\n\n"
      "The one difference this makes: a data error in a value nobody reads "
      "is not found (a malformed number in an unread column, a corrupt image "
      "whose pixels are dropped). With `on_error: skip` that record is kept "
      "instead of skipped; with `fail` the run goes on. The output is "
      "otherwise byte-identical. To check every value, turn the pass off: "
      "`--disable-pass sluice-push-projections` (Spark's CSV column pruning "
      "makes the same trade).";
  op.example = "- select: [image, label]";
  op.typeDoc = "the listed fields, in the listed order.";
  op.params = {
      param("fields", ParamKind::FieldList)
          .req()
          .length(1, std::numeric_limits<size_t>::max())
          .describe("The fields to keep."),
  };
  op.shorthand = "fields";
  op.cost = {10, 0, 1};
  op.typeRule = [](TypeContext &ctx) {
    RecordType out;
    const Value &fields = ctx.param("fields");
    for (const Value &item : fields.items()) {
      const std::string &name = item.asString();
      const Field *f = ctx.input().find(name);
      if (!f) {
        ctx.error(item,
                  "no field '" + name + "'" +
                      didYouMean(name, ctx.input().names()),
                  "the fields are: " + fieldList(ctx.input()));
        continue;
      }
      if (out.find(name)) {
        ctx.error(item, "field '" + name + "' is selected twice");
        continue;
      }
      out.set(name, f->type);
    }
    return out;
  };
  // The positions of the kept fields, found once per step.
  op.recordKernel = [](const RecordSite &site) -> Expected<RecordKernel> {
    std::vector<size_t> from;
    for (const Field &f : site.output.fields()) {
      int i = site.input.indexOf(f.name);
      if (i < 0)
        return Status::error("its input has no field '" + f.name + "'");
      from.push_back(static_cast<size_t>(i));
    }
    return RecordKernel([from](Record &rec,
                               const KernelCall &) -> Expected<bool> {
      std::vector<Tensor> fields;
      fields.reserve(from.size());
      for (size_t i : from) {
        if (i >= rec.fields.size())
          return Status::error("internal error: record has " +
                               std::to_string(rec.fields.size()) + " fields");
        fields.push_back(std::move(rec.fields[i]));
      }
      rec.fields = std::move(fields);
      return true;
    });
  };
  return op;
}
static OpRegistration regSelect(select());

OpDef rename() {
  OpDef op = record("rename");
  op.traits.perRecord = true;
  op.traits.count = Cardinality::OneToOne;
  op.summary = "Renames fields.";
  op.doc = "Written as a mapping from old to new names (short for "
           "`rename: {mapping: {image: pixels}}`). Renames happen at once, "
           "so `{a: b, b: a}` swaps two fields. Fields keep their position.";
  op.example = "- rename: {image: pixels, label: target}";
  op.typeDoc = "the same fields with new names.";
  op.params = {
      param("mapping", ParamKind::FieldMap)
          .req()
          .describe("Old name to new name."),
  };
  op.shorthand = "mapping";
  op.cost = {5, 0, 1};
  op.typeRule = [](TypeContext &ctx) {
    const RecordType &in = ctx.input();
    const Value &mapping = ctx.param("mapping");
    std::map<std::string, std::string> renames;
    std::map<std::string, std::string> targets; // new -> old
    bool ok = true;
    for (const auto &[from, toV] : mapping.entries()) {
      if (!in.find(from)) {
        ctx.error(toV, "no field '" + from + "' to rename" +
                           didYouMean(from, in.names()));
        ok = false;
        continue;
      }
      if (!requireFieldName(ctx, toV)) {
        ok = false;
        continue;
      }
      const std::string &to = toV.asString();
      auto [it, inserted] = targets.emplace(to, from);
      if (!inserted) {
        ctx.error(toV, "both '" + it->second + "' and '" + from +
                           "' are renamed to '" + to + "'");
        ok = false;
        continue;
      }
      renames[from] = to;
    }
    if (!ok)
      return in;
    for (const auto &[from, toV] : mapping.entries()) {
      const std::string &to = toV.asString();
      // A clash unless the existing field is itself renamed away.
      if (to != from && in.find(to) && !renames.count(to)) {
        ctx.error(toV,
                  "cannot rename '" + from + "' to '" + to +
                      "': a field named '" + to + "' already exists",
                  "drop it first with `select`, or rename it too");
        ok = false;
      }
    }
    if (!ok)
      return in;
    std::vector<Field> fields;
    for (const Field &f : in.fields()) {
      auto it = renames.find(f.name);
      fields.push_back(
          Field{it == renames.end() ? f.name : it->second, f.type});
    }
    return RecordType(std::move(fields));
  };
  op.recordKernel = [](const RecordSite &) -> Expected<RecordKernel> {
    return RecordKernel([](Record &, const KernelCall &) -> Expected<bool> {
      return true; // names live in the record type only
    });
  };
  return op;
}
static OpRegistration regRename(rename());

/// filter's `where`, parsed and compiled once per step against the input
/// record type; the record and the rows kernels share it.
Expected<std::shared_ptr<const kernels::CompiledExpr>>
compileWhere(const RecordSite &site) {
  const Value &text = site.params["where"];
  if (!text.isString())
    return Status::error("parameter 'where' is missing");
  ExprError err;
  ExprPtr e = parseExpr(text.asString(), err);
  if (!e)
    return Status::error("expression '" + text.asString() +
                         "': " + err.message);
  Expected<kernels::CompiledExpr> compiled =
      kernels::CompiledExpr::compileRecord(*e, site.input);
  if (!compiled)
    return compiled.status();
  return std::make_shared<const kernels::CompiledExpr>(compiled.take());
}

OpDef filter() {
  OpDef op = record("filter");
  op.traits.perRecord = true;
  op.traits.count = Cardinality::Fewer;
  op.traits.dropReason = "where is false";
  op.traits.condition = "where";
  op.summary = "Keeps the records for which a condition holds.";
  op.doc = "The condition is an expression (see [map](#map)) over the "
           "record's fields: numeric scalar fields by name, entries of "
           "fixed-length vectors as `dense[3]`. Dropped records are counted "
           "in the run's accounting.\n\n"
           "The compiler moves filters as early as their fields allow "
           "(sluice-push-filters): before every element step that does not "
           "write a field the condition reads, so a cheap condition runs "
           "before an expensive decode. It never moves a filter across "
           "`shuffle`, `batch`, `padded_batch`, `unbatch`, `take`, `skip`, "
           "`shard`, `repeat`, `cache`, `interleave`, `prefetch`, `rename` or "
           "another filter. Random steps are crossed: their draws derive from "
           "the record's position in the source, which a filter does not "
           "change, so every surviving record gets the same crop or flip. "
           "Records the filter drops are then not processed by the steps it "
           "moved before: a data error those steps would have raised on such "
           "a record (a corrupt image) is not reported, and the record counts "
           "as filtered rather than skipped.\n\n"
           "With the code generator on (the default; `--no-jit` turns it "
           "off), a condition over numeric fields (integers, bool, f16, f32, "
           "f64) runs as a "
           "generated native function: the interpreter's own bytecode "
           "lowered instruction by instruction, so it keeps exactly the "
           "records the interpreter keeps. A record the interpreter would "
           "reject (an index past the end of a variable-length field) is "
           "handed to it and fails with its message.";
  op.example = "- filter: {where: \"label >= 0 and dense[0] < 5\"}";
  op.typeDoc = "unchanged.";
  op.params = {
      param("where", ParamKind::Expr)
          .req()
          .describe("A condition (bool expression) over the fields."),
  };
  op.shorthand = "where";
  op.cost = {20, 0, 1};
  op.typeRule = [](TypeContext &ctx) {
    const RecordType &in = ctx.input();
    const Value &where = ctx.param("where");
    ExprPtr e = parseExprParam(ctx, "where");
    if (!e)
      return in;
    bool ok = true;
    forEachVar(*e, [&](const Expr &var, const Expr *index) {
      if (!ok)
        return;
      const Field *f = in.find(var.name);
      if (!f) {
        ctx.errorInString(where, var.offset,
                          "unknown field '" + var.name + "'" +
                              didYouMean(var.name, in.names()),
                          "the fields are: " + fieldList(in));
        ok = false;
        return;
      }
      const FieldType &t = f->type;
      if (!isNumeric(t.elem)) {
        ctx.errorInString(where, var.offset,
                          describeField(var.name, t) +
                              "; conditions compute on numbers and bools");
        ok = false;
        return;
      }
      if (!index) {
        if (!t.isScalar()) {
          ctx.errorInString(
              where, var.offset,
              describeField(var.name, t) +
                  "; a condition needs one value of it, not all of them",
              t.rank() == 1 ? "index it, e.g. '" + var.name + "[0]'" : "");
          ok = false;
        }
        return;
      }
      if (t.rank() != 1) {
        ctx.errorInString(where, index->offset,
                          describeField(var.name, t) +
                              "; only rank-1 fields can be indexed");
        ok = false;
      } else if (t.shape[0] < 0) {
        ctx.errorInString(where, index->offset,
                          describeField(var.name, t) +
                              "; its length varies, so a constant index may "
                              "not exist");
        ok = false;
      } else if (index->index >= t.shape[0]) {
        ctx.errorInString(where, index->offset,
                          "index " + std::to_string(index->index) +
                              " is out of range for field '" + var.name +
                              "' (" + t.str() + ")",
                          "indices go from 0 to " +
                              std::to_string(t.shape[0] - 1));
        ok = false;
      }
    });
    if (!ok)
      return in;
    ElemType result;
    ExprTypeError err;
    if (!inferExprType(
            *e,
            [&](const std::string &n, ElemType &out) {
              const Field *f = in.find(n);
              if (f)
                out = f->type.elem;
              return f != nullptr;
            },
            result, err)) {
      ctx.errorInString(where, err.offset, err.message);
      return in;
    }
    if (result != ElemType::Bool)
      ctx.errorInString(where, e->offset,
                        "filter needs a condition (a bool), but '" +
                            where.asString() + "' is " +
                            std::string(elemTypeName(result)),
                        "compare it, e.g. '" + e->str() + " != 0'");
    return in;
  };
  op.recordKernel = [](const RecordSite &site) -> Expected<RecordKernel> {
    auto code = compileWhere(site);
    if (!code)
      return code.status();
    return RecordKernel([code = code.take()](Record &rec, const KernelCall &) {
      return code->test(rec);
    });
  };
  op.rowsKernel = [](const RecordSite &site) -> Expected<RowsKernel> {
    auto code = compileWhere(site);
    if (!code)
      return code.status();
    return RowsKernel([code = code.take()](const std::vector<Tensor> &columns,
                                           const uint32_t *rows, int64_t n,
                                           uint8_t *keep) {
      return code->testRows(columns, rows, n, keep);
    });
  };
  return op;
}
static OpRegistration regFilter(filter());

//===----------------------------------------------------------------------===//
// shuffle, batch, padded_batch, unbatch
//===----------------------------------------------------------------------===//

OpDef shuffle() {
  OpDef op = record("shuffle");
  op.traits.reorders = true;
  op.traits.orderWindow = "buffer";
  op.traits.heldRecords = [](const Value &params) -> int64_t {
    return params["buffer"].isNumber() ? params["buffer"].asInt() : 0;
  };
  op.traits.sameEachEpoch = [](const Value &params) {
    const Value &again = params["reshuffle_each_epoch"];
    return again.isBool() && !again.asBool();
  };
  op.summary = "Shuffles records through a buffer of `buffer` records.";
  op.doc = "Keeps `buffer` records and emits a random one of them for each "
           "new record, as tf.data does: a buffer at least the size of the "
           "dataset gives a uniform shuffle. The buffer's bytes count "
           "against the memory budget. Written after steps that give one "
           "record for each record (decode, augmentations, select), it is "
           "moved up by the compiler to where its records are smallest, "
           "usually right after the source (sluice-hoist-shuffle: the same "
           "output bytes, since every random draw is keyed by the record's "
           "source position; `sluice check` says where it runs).";
  op.example = "- shuffle: {buffer: 4096}";
  op.typeDoc = "unchanged.";
  op.params = {
      param("buffer", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Number of records held for shuffling."),
      param("reshuffle_each_epoch", ParamKind::Bool)
          .def(Value::boolean(true))
          .describe("Use a different order in every epoch."),
  };
  op.shorthand = "buffer";
  op.stochastic = true;
  op.cost = {100, 0.05, 1};
  op.typeRule = sameType();
  return op;
}
static OpRegistration regShuffle(shuffle());

OpDef batch() {
  OpDef op = record("batch");
  op.traits.count = Cardinality::Groups;
  op.traits.fixedRows = true;
  // The rows of the batch being filled and of the one handed on.
  op.traits.heldRecords = [](const Value &params) -> int64_t {
    return params["size"].isNumber() ? 2 * params["size"].asInt() : 0;
  };
  op.summary = "Stacks `size` consecutive records into one.";
  op.doc = "Every field gets a leading batch dim. Fields must have the same "
           "shape in every record (use `padded_batch` for varying lengths). "
           "Without `drop_remainder` the last batch of an epoch may be "
           "smaller, so the batch dim is `?`.";
  op.example = "- batch: {size: 128, drop_remainder: true}";
  op.typeDoc = "each field `T[dims]` becomes `T[size,dims]` with "
               "`drop_remainder`, else `T[?,dims]`.";
  op.params = {
      param("size", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Records per batch."),
      param("drop_remainder", ParamKind::Bool)
          .def(Value::boolean(false))
          .describe("Drop a last, smaller batch (gives a static batch "
                    "dim)."),
  };
  op.shorthand = "size";
  op.cost = {50, 0.5, 1};
  op.typeRule = [](TypeContext &ctx) {
    int64_t size = intOr(ctx.param("size"), 1);
    bool drop = boolOr(ctx.param("drop_remainder"), false);
    RecordType out;
    for (const Field &f : ctx.input().fields()) {
      if (!f.type.hasStaticShape()) {
        ctx.errorAtOp("cannot batch field '" + f.name + "' of type " +
                          f.type.str() + ": its shape varies between records",
                      "resize or crop it to a fixed size first (resize, "
                      "center_crop, random_resized_crop), or use "
                      "padded_batch");
        continue;
      }
      FieldType t = f.type;
      t.shape.insert(t.shape.begin(), drop ? size : kDynamic);
      out.set(f.name, t);
    }
    return out;
  };
  return op;
}
static OpRegistration regBatch(batch());

OpDef paddedBatch() {
  OpDef op = record("padded_batch");
  op.traits.count = Cardinality::Groups;
  // The rows of the batch being filled and of the one handed on.
  op.traits.heldRecords = [](const Value &params) -> int64_t {
    return params["size"].isNumber() ? 2 * params["size"].asInt() : 0;
  };
  op.summary = "Batches records whose fields vary in length, padding them.";
  op.doc = "Like `batch`, but fields with `?` dims are padded with "
           "`pad_value` to the longest in the batch, or padded or cut to "
           "`length` when given (then the dim is static). Typical for token "
           "sequences.";
  op.example = "- padded_batch: {size: 32, length: 128, pad_value: 0}";
  op.typeDoc = "each field gets a leading batch dim (`size` with "
               "`drop_remainder`, else `?`); its `?` dims become `length` "
               "when given.";
  op.params = {
      param("size", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Records per batch."),
      param("drop_remainder", ParamKind::Bool)
          .def(Value::boolean(false))
          .describe("Drop a last, smaller batch."),
      param("length", ParamKind::Int)
          .atLeast(1)
          .describe("Pad or cut every varying dim to this size."),
      param("pad_value", ParamKind::Float)
          .def(Value::real(0))
          .describe("Value used for padding numeric fields (bytes and "
                    "string fields are padded with empty strings)."),
  };
  op.cost = {100, 0.6, 1.2};
  op.typeRule = [](TypeContext &ctx) {
    int64_t size = intOr(ctx.param("size"), 1);
    bool drop = boolOr(ctx.param("drop_remainder"), false);
    const Value &lengthV = ctx.param("length");
    const Value &padV = ctx.param("pad_value");
    RecordType out;
    for (const Field &f : ctx.input().fields()) {
      FieldType t = f.type;
      if (!t.hasStaticShape() && isNumeric(t.elem) &&
          !fitsIn(t.elem, doubleOr(padV, 0))) {
        ctx.error(padV, "pad_value " + padV.str() + " does not fit field '" +
                            f.name + "' (" + t.str() + ")");
        continue;
      }
      for (int64_t &d : t.shape)
        if (d < 0 && lengthV.isNumber())
          d = lengthV.asInt();
      t.shape.insert(t.shape.begin(), drop ? size : kDynamic);
      out.set(f.name, t);
    }
    return out;
  };
  return op;
}
static OpRegistration regPaddedBatch(paddedBatch());

OpDef unbatch() {
  OpDef op = record("unbatch");
  op.traits.count = Cardinality::More;
  op.traits.splitsRecords = true;
  op.traits.notServed = {"its rows are cut from batches a worker would have "
                         "to make from the epoch's start",
                         "batch once, at the end"};
  op.summary = "Splits each record along its first dim into records.";
  op.doc = "The inverse of `batch`: a record whose fields have a leading dim "
           "n becomes n records. All fields must have the same leading size "
           "in a record.";
  op.example = "- unbatch: {}";
  op.typeDoc = "each field `T[n,dims]` becomes `T[dims]`.";
  op.params = {};
  op.cost = {50, 0.5, 1};
  op.typeRule = [](TypeContext &ctx) {
    RecordType out;
    for (const Field &f : ctx.input().fields()) {
      if (f.type.isScalar()) {
        ctx.errorAtOp("cannot unbatch field '" + f.name + "' of type " +
                          f.type.str() + ": it has no leading dim to split",
                      "select only batched fields before unbatch");
        continue;
      }
      FieldType t = f.type;
      t.shape.erase(t.shape.begin());
      out.set(f.name, t);
    }
    return out;
  };
  return op;
}
static OpRegistration regUnbatch(unbatch());

//===----------------------------------------------------------------------===//
// repeat, take, skip, shard, interleave
//===----------------------------------------------------------------------===//

OpDef repeat() {
  OpDef op = record("repeat");
  op.traits.count = Cardinality::More;
  op.traits.rerunsSource = true;
  op.traits.notServed = {"it runs the source again inside one epoch",
                         "run more epochs instead (`epochs:` or set_epoch)"};
  op.traits.noCacheAfter = "each pass after it is a new epoch for the steps "
                           "before it, so a cache after it would hold every "
                           "pass";
  op.summary = "Repeats the stream `count` times, or forever.";
  op.doc = "Each repetition is a new epoch for the random ops before it "
           "(new crops, new shuffle order).";
  op.example = "- repeat: 2";
  op.typeDoc = "unchanged.";
  op.params = {
      param("count", ParamKind::Int)
          .atLeast(1)
          .describe("Number of passes; omitted repeats forever."),
  };
  op.shorthand = "count";
  op.cost = {5, 0, 1};
  op.typeRule = sameType();
  return op;
}
static OpRegistration regRepeat(repeat());

OpDef take() {
  OpDef op = record("take");
  op.traits.count = Cardinality::Fewer;
  op.traits.notServed = {"it counts records across the whole stream",
                         "stop the trainer's loop after N batches instead"};
  op.traits.noCacheAfter = "it ends the stream early, so a cache after it "
                           "would never hold a whole pass";
  op.summary = "Keeps only the first `count` records.";
  op.doc = "Stops reading the source once `count` records have passed.";
  op.example = "- take: 1000";
  op.typeDoc = "unchanged.";
  op.params = {
      param("count", ParamKind::Int)
          .req()
          .atLeast(0)
          .describe("Number of records to keep."),
  };
  op.shorthand = "count";
  op.cost = {5, 0, 1};
  op.typeRule = sameType();
  return op;
}
static OpRegistration regTake(take());

OpDef skip() {
  OpDef op = record("skip");
  op.traits.count = Cardinality::Fewer;
  op.traits.notServed = {"it counts records across the whole stream",
                         "stop the trainer's loop after N batches instead"};
  op.summary = "Drops the first `count` records.";
  op.doc = "Skipped records are counted in the run's accounting.";
  op.example = "- skip: 1000";
  op.typeDoc = "unchanged.";
  op.params = {
      param("count", ParamKind::Int)
          .req()
          .atLeast(0)
          .describe("Number of records to drop."),
  };
  op.shorthand = "count";
  op.cost = {5, 0, 1};
  op.typeRule = sameType();
  return op;
}
static OpRegistration regSkip(skip());

OpDef shard() {
  OpDef op = record("shard");
  op.traits.count = Cardinality::Fewer;
  op.traits.notServed = {"the trainers' shares are the ranks'",
                         "give the trainers rank= and world_size= instead of "
                         "`shard`"};
  op.summary = "Keeps every num_shards-th record, starting at `index`.";
  op.doc = "For data-parallel training: worker `index` of `num_shards` sees "
           "records index, index + num_shards, ... Place it right after the "
           "source so other workers' records are never decoded.";
  op.example = "- shard: {num_shards: 8, index: 0}";
  op.typeDoc = "unchanged.";
  op.params = {
      param("num_shards", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Number of shards (workers)."),
      param("index", ParamKind::Int)
          .req()
          .atLeast(0)
          .describe("This shard, from 0 to num_shards - 1."),
  };
  op.cost = {5, 0, 1};
  op.typeRule = [](TypeContext &ctx) {
    const Value &index = ctx.param("index");
    int64_t n = intOr(ctx.param("num_shards"), 1);
    if (intOr(index, 0) >= n)
      ctx.error(index,
                "index " + index.str() + " is out of range for num_shards " +
                    std::to_string(n),
                "shards are numbered 0 to " + std::to_string(n - 1));
    return ctx.input();
  };
  return op;
}
static OpRegistration regShard(shard());

OpDef interleave() {
  OpDef op = record("interleave");
  op.traits.reorders = true;
  op.traits.configuresSource = true;
  op.traits.notServed = {"it reads several files at once in a rotating order",
                         "remove it: workers read the source by position"};
  op.summary = "Reads several source files at once, interleaving their "
               "records.";
  op.doc = "Takes `block_length` records from each of `cycle_length` open "
           "files in turn. Mixes records from different files (useful when "
           "files are sorted by class) and overlaps their reads. The order "
           "is deterministic.";
  op.example = "- interleave: {cycle_length: 8, block_length: 1}";
  op.typeDoc = "unchanged.";
  op.params = {
      param("cycle_length", ParamKind::Int)
          .def(Value::integer(4))
          .atLeast(1)
          .describe("Files read at once."),
      param("block_length", ParamKind::Int)
          .def(Value::integer(1))
          .atLeast(1)
          .describe("Consecutive records taken from one file."),
  };
  op.cost = {20, 0, 1};
  op.typeRule = sameType();
  return op;
}
static OpRegistration regInterleave(interleave());

//===----------------------------------------------------------------------===//
// cache, prefetch
//===----------------------------------------------------------------------===//

OpDef cache() {
  OpDef op = record("cache");
  op.traits.materializes = true;
  op.traits.notServed = {"a worker keeps nothing between chunks",
                         "remove it (each chunk is made anew on its worker)"};
  op.summary = "Stores the stream after the first epoch and replays it.";
  op.doc = "Later epochs read the cached records instead of running the "
           "steps before `cache` again, so put it after expensive "
           "deterministic steps and before random ones: a cache after a "
           "random step (or after a source with `shuffle: true`), from a "
           "`cache` step or a schedule, is refused, since every later epoch "
           "would replay the first epoch's draws and order. `memory` counts "
           "against the memory budget; `disk` writes to `path` (default: a "
           "temporary directory).";
  op.example = "- cache: memory";
  op.typeDoc = "unchanged.";
  op.params = {
      enumParam("to", {"memory", "disk"})
          .def(Value::string("memory"))
          .describe("Where the cached records are kept."),
      param("path", ParamKind::String)
          .describe("Directory for `to: disk`, relative to the spec file."),
  };
  op.shorthand = "to";
  op.cost = {100, 0.3, 1};
  op.typeRule = [](TypeContext &ctx) {
    const Value &path = ctx.param("path");
    if (path.isString() && stringOr(ctx.param("to"), "memory") == "memory")
      ctx.error(path, "path is only used with `to: disk`",
                "add `to: disk`, or drop `path`");
    return ctx.input();
  };
  return op;
}
static OpRegistration regCache(cache());

OpDef prefetch() {
  OpDef op = record("prefetch");
  op.traits.prefetchDepth = "buffer";
  op.summary = "Runs the steps before it ahead, buffering their output.";
  op.doc = "Decouples the producer from the consumer (the training loop). "
           "Without `buffer` the autotuner picks the depth within the memory "
           "budget.";
  op.example = "- prefetch: 4";
  op.typeDoc = "unchanged.";
  op.params = {
      param("buffer", ParamKind::Int)
          .atLeast(0)
          .describe("Records (batches) buffered; omitted = autotuned."),
  };
  op.shorthand = "buffer";
  op.cost = {50, 0, 1};
  op.typeRule = sameType();
  return op;
}
static OpRegistration regPrefetch(prefetch());

} // namespace
} // namespace sluice
