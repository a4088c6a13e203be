//===- Registry.h - The op registry -----------------------------*- C++ -*-===//
//
// Every source and step of the pipeline language is described here once: its
// parameters (types, defaults, ranges), its type rule, traits, cost hints,
// and its kernel binder. The front end validates specs against this table,
// `sluice ops` and docs/ops.md are generated from it, and the runtime binds
// each step's kernel from the entry (runtime/lib/ElementOps.cpp). MLIR-free.
//
// Adding an op: one `static OpRegistration` in its own ops/lib/ file
// (GrayscaleOp.cpp), nothing else.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_REGISTRY_H
#define SLUICE_OPS_REGISTRY_H

#include "sluice/ops/Random.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/// What a parameter accepts. Front-end conversion from YAML follows this.
enum class ParamKind {
  Bool,
  Int,
  Float, ///< ints are accepted and widened
  String,
  Enum,      ///< one of ParamSpec::choices
  Size,      ///< byte size: 512MiB, 4GiB, 1000000, 64KB
  Expr,      ///< an expression string, parsed and checked by the type rule
  Field,     ///< the name of a field of the input record
  FieldList, ///< a list of field names of the input record
  DType,     ///< an element type name: u8, i64, f32, ...
  IntList,
  FloatList,
  StringList,
  Struct,     ///< a mapping with its own ParamSpecs (members)
  StructList, ///< a list of Struct
  FieldMap,   ///< a mapping from input field names to new names (rename)
};

std::string_view paramKindName(ParamKind k);

/// Whether a source's parameter names the data it reads (ParamSpec::dataPath).
enum class DataPath {
  None,
  File, ///< a file or directory path (image_folder's `root`, idx's `images`)
  Glob, ///< a glob of files (csv's `files`)
};

/// One parameter of an op.
struct ParamSpec {
  std::string name;
  ParamKind kind = ParamKind::String;
  bool required = false;
  std::optional<Value> defaultValue; ///< filled in when the spec omits it
  std::string doc;
  /// Inclusive/exclusive numeric bounds (Int, Float, and list elements).
  std::optional<double> min, max;
  bool minExclusive = false, maxExclusive = false;
  /// Length bounds for list kinds.
  size_t minLen = 0, maxLen = std::numeric_limits<size_t>::max();
  /// For list kinds: a scalar is accepted and read as a one-element list,
  /// or, with broadcastTo > 0, repeated to that many elements.
  bool scalarOk = false;
  size_t broadcastTo = 0;
  std::vector<std::string> choices; ///< Enum
  std::vector<ParamSpec> members;   ///< Struct / StructList
  /// Names the parameter had before; the front end still accepts them,
  /// with a note.
  std::vector<std::string> oldNames;
  /// For a source's String parameter: it names the data the source reads,
  /// a path or a glob (a compiled executable's `--source-path` replaces
  /// it; a glob's directory part is escaped when made absolute).
  DataPath dataPath = DataPath::None;

  // Fluent construction for registry entries.
  ParamSpec &req() {
    required = true;
    return *this;
  }
  ParamSpec &def(Value v) {
    defaultValue = std::move(v);
    return *this;
  }
  ParamSpec &describe(std::string d) {
    doc = std::move(d);
    return *this;
  }
  ParamSpec &atLeast(double v) {
    min = v;
    minExclusive = false;
    return *this;
  }
  ParamSpec &above(double v) {
    min = v;
    minExclusive = true;
    return *this;
  }
  ParamSpec &atMost(double v) {
    max = v;
    maxExclusive = false;
    return *this;
  }
  ParamSpec &below(double v) {
    max = v;
    maxExclusive = true;
    return *this;
  }
  ParamSpec &length(size_t lo, size_t hi) {
    minLen = lo;
    maxLen = hi;
    return *this;
  }
  ParamSpec &scalar(size_t broadcast = 0) {
    scalarOk = true;
    broadcastTo = broadcast;
    return *this;
  }
  ParamSpec &formerly(std::string oldName) {
    oldNames.push_back(std::move(oldName));
    return *this;
  }
  ParamSpec &names(DataPath what) {
    dataPath = what;
    return *this;
  }
};

/// Shorthands: `param("size", ParamKind::Int).req().atLeast(1)`.
ParamSpec param(std::string name, ParamKind kind);
ParamSpec enumParam(std::string name, std::vector<std::string> choices);
ParamSpec structParam(std::string name, std::vector<ParamSpec> members,
                      bool isList = false);

/// What an op does to the stream, which decides how the runtime and the
/// compiler treat it.
enum class OpKind {
  Source,  ///< produces records from files
  Element, ///< one record in, one record out; may run in parallel
  Record,  ///< works on the stream (filter, shuffle, batch, cache, ...)
};

/// How the compiler may fuse an element op.
enum class FuseKind {
  None,        ///< a library call (decode, hash, tokenize)
  ElementWise, ///< out[i] = f(in[i]) (normalize, cast, clamp, map)
  IndexRemap,  ///< out[i] = in[g(i)] (crop, flip, transpose, pad)
};

/// How an op changes the number of records that pass it.
enum class Cardinality {
  Source,   ///< makes the stream
  OneToOne, ///< one record out for each record in (a data error aside)
  Fewer,    ///< drops records (filter, take, skip, shard)
  More,     ///< makes several records of one, or repeats them
  Groups,   ///< combines several records into one (batch)
  Same,     ///< passes the stream through unchanged (cache, prefetch)
};

/// How an op's random draws are keyed.
enum class RandomKey {
  None,           ///< deterministic
  SourcePosition, ///< by (seed, epoch, record's source index, step): where
                  ///< the record is in the stream does not matter
  StreamOrder,    ///< by the order records arrive in (shuffle)
};

/// How a source reads only the fields later steps use
/// (sluice-push-projections).
enum class Projection {
  None,        ///< it reads every field
  ListFields,  ///< `projectionParam` lists the fields to read (csv `read`)
  KeepEntries, ///< only the entries of StructList `projectionParam` whose
               ///< `as` (or `name`) is a kept field stay (tfrecord)
};

/// The loop body the code generator emits for a value-wise op, reading the
/// parameters each form names. An op states its form; a new op of a form
/// the generator knows needs no change outside its entry.
enum class ValueForm {
  None,       ///< not compiled (the runtime runs the op's kernel)
  FillNaN,    ///< NaN -> `value` (fill_missing)
  Clamp,      ///< min(max(x, `min`), `max`) (clamp)
  Convert,    ///< to the output's element type (cast)
  HashBucket, ///< hash(x) mod `buckets` (hash_bucket)
  Bucketize,  ///< the number of sorted `boundaries` <= x (bucketize)
  Expression, ///< the expression `expr` of x (map)
  ScaleShift, ///< (x - `mean`[c]) / `std`[c], c the channel (normalize)
};

/// The index map of an index-remap op, as the runtime's RemapChain and the
/// code generator compose it, reading the parameters each form names.
enum class RemapForm {
  None,
  CenterCrop, ///< the centred `size` box (center_crop)
  RandomCrop, ///< a random `size` box after `padding` (random_crop)
  Flip,       ///< mirrored along `axis` with probability `p` (random_flip)
  Permute,    ///< dims permuted: `to` CHW/HWC, or `perm` (transpose)
  Pad,        ///< `padding` added per side, filled with `value` (pad)
};

/// What passes, the code generator, the runtime and the tuner ask about an
/// op instead of its name. Filled by the registry helpers from the op's kind
/// (element ops: per record, one to one, may raise data errors) and set by
/// the entries that differ.
struct OpTraits {
  /// Looks at one record at a time and never at its neighbours or its place
  /// in the stream (element ops, select, rename, filter).
  bool perRecord = false;
  Cardinality count = Cardinality::OneToOne;
  RandomKey random = RandomKey::None;
  /// May reject a record because of its values (a corrupt image, an id out
  /// of range): under the source's `on_error: skip` the record is skipped,
  /// so the step is then not one to one.
  bool dataErrors = false;
  /// Why a per-record op drops the records it drops, as its counters name
  /// it (filter: "where is false"); null for ops that drop none.
  const char *dropReason = nullptr;
  /// Changes the order of records.
  bool reorders = false;
  /// Keeps the records it passes to replay them later (cache): moving a
  /// step across it changes what is replayed.
  bool materializes = false;
  /// Every output value is a function of the input value at the same
  /// position (and, where `perChannel` says so, of its channel: the
  /// position's last index). Runs of such steps on one field are fused
  /// into one loop over the values (sluice-fuse-maps, the code generator)
  /// and ride along in a remap chain (sluice-fuse-remaps).
  bool valueWise = false;
  /// For a value-wise op: whether the step with these (validated,
  /// defaulted) parameters depends on the channel (normalize with
  /// per-channel mean/std). Null: never.
  std::function<bool(const Value &params)> perChannel;
  /// Moves values without computing new ones: out[i] = in[g(i)], or a fill
  /// value where g(i) falls outside (crops, flips, transpose, pad); the
  /// runtime's RemapChain composes such steps and the code generator
  /// compiles the chain into one loop nest (sluice-fuse-remaps).
  bool indexRemap = false;
  /// Why the op may move after a `batch` (sluice-fuse-map-batch): value in,
  /// value out, with no per-record state and no per-record data errors, so
  /// applying it to a batch equals batching its results. Null: it may not.
  const char *commutesWithBatch = nullptr;
  /// For a stochastic op: whether, with these (validated, defaulted)
  /// parameters, every epoch draws the same (a shuffle told
  /// `reshuffle_each_epoch: false`), so a cache after it replays exactly
  /// what a later epoch would draw. Null: each epoch draws anew.
  std::function<bool(const Value &params)> sameEachEpoch;
  /// Why no cache may follow the op, whatever comes before it (repeat: a
  /// cache after it would hold every pass; take: it ends the stream before
  /// the cache completes): the tuner offers no cache from here on. Null:
  /// the op does not forbid one.
  const char *noCacheAfter = nullptr;
  /// A grouping op (Cardinality::Groups) whose rows have one shape known
  /// before a batch is filled (batch; padded_batch pads each batch to its
  /// longest record): its buffers are laid out up front, so the runtime can
  /// hand out page-locked ones (pinned batches, runtime/Pinned.h).
  bool fixedRows = false;
  /// Splits each record along its first dim into several (unbatch): the
  /// batches made before it never leave the pipeline whole.
  bool splitsRecords = false;
  /// Runs the stream before it again within one epoch (repeat): the source
  /// makes more than one pass an epoch, so the pass after this one is not
  /// known to be the next epoch's first.
  bool rerunsSource = false;
  /// Why a `sluice serve` worker cannot run the op, and what to write
  /// instead. A worker makes a chunk of outputs from their positions alone
  /// (remote/lib/Replay.h): it runs per-record steps, a shuffle whose order
  /// it replays, a filter, one batch and prefetch; an op that counts,
  /// repeats or keeps records across the whole stream says here why it
  /// cannot be one of them (docs/distributed.md, "What runs where").
  /// Null `why`: the op gives no reason of its own.
  struct NotServed {
    const char *why = nullptr;
    const char *instead = nullptr;
  } notServed;
  /// Configures how the source reads its files (interleave), so only
  /// per-record steps may come before it.
  bool configuresSource = false;
  /// The Int parameter giving how many records the op buffers between the
  /// thread before it and the one after (prefetch's `buffer`): the op is a
  /// thread boundary, and the memory checks and the tuner read the depth.
  const char *prefetchDepth = nullptr;
  /// The Int parameter giving how many records a reordering op holds to
  /// draw its order from (shuffle's `buffer`): the tuner's probes cap it
  /// (it shapes the order, not the rate), and one pass over the source
  /// bounds what it holds.
  const char *orderWindow = nullptr;
  /// How many records the op holds at once with these parameters, as the
  /// runtime's static memory check counts them (a shuffle's buffer, two
  /// batches' rows); null: none beyond the record in hand.
  std::function<int64_t(const Value &params)> heldRecords;
  /// A per-record op that keeps the records for which this Expr parameter
  /// holds (filter's `where`): the code generator compiles the condition.
  const char *condition = nullptr;
  /// Why the step does nothing with these parameters (a cast to the type
  /// the field has, an identity transpose), given whether the record type
  /// after it equals the one before; "" when it may do something. For
  /// sluice-eliminate-noops. Null: never a no-op.
  std::function<std::string(const Value &params, bool sameType)> noopReason;
  /// Decodes encoded bytes into an image (decode_image): a step right after
  /// it with `fusedWithDecoder` may be fused with it.
  bool decoder = false;
  /// The internal op that decodes and runs this op in one pass
  /// (random_resized_crop: decode_random_resized_crop decodes only the
  /// crop box's rows), for sluice-fuse-decode-crop.
  const char *fusedWithDecoder = nullptr;
  /// For a source: how it can read fewer fields, and the parameter that
  /// says which.
  Projection projection = Projection::None;
  const char *projectionParam = nullptr;
  /// A source of record files (csv, tfrecord, ...): an empty file gives no
  /// records, which is almost never meant, so the run warns.
  bool warnsOnEmptyFiles = false;
  /// How the code generator computes a value-wise op.
  ValueForm valueForm = ValueForm::None;
  /// The index map of an index-remap op.
  RemapForm remapForm = RemapForm::None;
  /// A fused decode + crop that can fold the flip, scale-shift and HWC to
  /// CHW permute right after it into its output loop
  /// (sluice-fuse-crop-epilogue).
  bool takesEpilogue = false;
};

/// Rough per-element costs the autotuner starts from before it has a profile.
struct CostHints {
  double nsPerElement = 50;    ///< fixed cost per record
  double nsPerByte = 0;        ///< cost per input byte of the main field
  double outputBytesRatio = 1; ///< output bytes / input bytes
};

/// What a type rule sees and how it reports problems.
class TypeContext {
public:
  virtual ~TypeContext();
  /// The record type flowing into the op (empty for sources).
  virtual const RecordType &input() const = 0;
  /// The parameters: a Map, validated against the ParamSpecs, defaults filled.
  virtual const Value &params() const = 0;
  /// Reports an error at the location of `at` (a parameter value).
  virtual void error(const Value &at, std::string message,
                     std::string hint = "") = 0;
  /// Reports an error at the op itself.
  virtual void errorAtOp(std::string message, std::string hint = "") = 0;
  /// Reports an error at a character offset inside a string value (for
  /// expression errors).
  virtual void errorInString(const Value &at, size_t offset,
                             std::string message, std::string hint = "") = 0;
  virtual bool failed() const = 0;
  /// Resolves a path written in the spec: relative paths are relative to
  /// the directory of the spec file.
  virtual std::string resolvePath(const std::string &path) const = 0;

  const Value &param(std::string_view name) const { return params()[name]; }
  /// The type of a field named by parameter `paramName` (a Field param,
  /// already checked to exist by the front end).
  const FieldType &fieldType(std::string_view paramName) const;
};

/// Computes the output record type from the input type and the parameters.
/// Reports through ctx and returns anything when ctx.failed().
using TypeRule = std::function<RecordType(TypeContext &ctx)>;

/// What a bound kernel sees of the run and the record besides its input.
class KernelCall {
public:
  /// Counts values a kernel repaired instead of refusing the record
  /// (tokenize's replaced UTF-8); the runtime passes its stage counters.
  class Repairs {
  public:
    virtual ~Repairs();
    virtual void addRepaired(const std::string &reason) = 0;
  };

  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t index = 0;         ///< the record's position in the source
  Repairs *repairs = nullptr; ///< null outside a pipeline

  /// The draws of random stream `stream` for this record: the same on any
  /// worker, in any order, in every run (Random.h).
  Rng rng(uint64_t stream) const { return Rng(seed, epoch, index, stream); }
  void repaired(const std::string &reason) const {
    if (repairs)
      repairs->addRepaired(reason);
  }
};

/// An op's kernel bound to one step: the input field's tensor in, the
/// result out. Called for every record from any worker thread.
using TensorKernel =
    std::function<Expected<Tensor>(const Tensor &in, const KernelCall &call)>;

/// The step a kernel is bound for.
struct KernelSite {
  /// The step's parameters, validated and defaulted.
  const Value &params;
  /// The step's name in the plan ("random_flip", "random_flip.2").
  std::string stepName;
  /// The types of the input field and of the result.
  FieldType input, output;
  /// The step's random stream: stepStream(op, stepName).
  uint64_t stream = 0;
  /// Where relative paths in the parameters start (the spec's directory).
  std::string baseDir;

  /// `path` resolved against baseDir.
  std::string resolvePath(const std::string &path) const;
};

/// Binds an op's kernel once per step: it parses the parameters into the
/// op's typed struct, precomputes what it can (a vocabulary, a compiled
/// expression) and returns the kernel. A failure is a message without the
/// step's name, which the runtime adds.
using KernelBinder = std::function<Expected<TensorKernel>(const KernelSite &)>;

/// A per-record step that works on the whole record rather than one field
/// (select, filter): false drops the record.
using RecordKernel =
    std::function<Expected<bool>(Record &rec, const KernelCall &call)>;
/// Where a record kernel is bound: the step's parameters and record types.
struct RecordSite {
  const Value &params;
  const RecordType &input;
  const RecordType &output;
};
using RecordBinder = std::function<Expected<RecordKernel>(const RecordSite &)>;

/// A record kernel over a run of records held as columns: `columns[f]`
/// holds field f of record i in row i; sets keep[j] (1 kept, 0 dropped) for
/// each of the `n` rows listed in `rows` (null: rows 0..n-1).
using RowsKernel =
    std::function<Status(const std::vector<Tensor> &columns,
                         const uint32_t *rows, int64_t n, uint8_t *keep)>;
using RowsBinder = std::function<Expected<RowsKernel>(const RecordSite &)>;

/// One op of the language.
struct OpDef {
  std::string name;
  OpKind kind = OpKind::Element;
  std::string summary; ///< one line
  std::string doc;     ///< a paragraph, markdown
  std::string example; ///< a YAML step, e.g. "- shuffle: {buffer: 4096}"
  /// The type rule in words, for docs: "`field` becomes f32, same shape".
  std::string typeDoc;
  std::vector<ParamSpec> params;
  /// The parameter bound when the op is written with a non-mapping value,
  /// e.g. `select: [image, label]` binds `fields`; empty if none.
  std::string shorthand;
  TypeRule typeRule;
  FuseKind fuse = FuseKind::None;
  bool stochastic = false; ///< draws random numbers (seeded per element)
  /// What passes and the tuner ask about the op (Registry::add fills
  /// `random` from `stochastic` when an entry leaves it None).
  OpTraits traits;
  /// Created only by compiler passes (e.g. a fused decode + crop): find()
  /// resolves it for the verifier, PlanGen and the runtime, but all(),
  /// names(), `sluice ops` and the docs leave it out, and the front end
  /// rejects it in a spec.
  bool internal = false;
  CostHints cost;
  /// An element op's kernel: the result of its `field` alone. The runtime
  /// binds it per step and stores the result per `field`/`as`, with no code
  /// of its own for the op (an op added this way is one registry entry, its
  /// kernel and its tests).
  KernelBinder kernel;
  /// A per-record op over the whole record (select, rename, filter).
  RecordBinder recordKernel;
  /// A per-record op that can also test many records at once (filter).
  RowsBinder rowsKernel;

  const ParamSpec *findParam(std::string_view name) const;
};

/// The table of all ops.
class Registry {
public:
  static Registry &instance();
  void add(OpDef def);
  const OpDef *find(std::string_view name) const;
  /// All ops a spec may use (internal ops left out), sorted by name,
  /// optionally of one kind.
  std::vector<const OpDef *> all() const;
  std::vector<const OpDef *> all(OpKind kind) const;
  std::vector<std::string> names(std::optional<OpKind> kind = {}) const;

private:
  std::vector<OpDef> ops_;
};

/// The traits of op `name`, or null when no op has that name.
const OpTraits *opTraits(std::string_view name);

/// Registers an op at static-initialization time.
struct OpRegistration {
  explicit OpRegistration(OpDef def) {
    Registry::instance().add(std::move(def));
  }
};

/// The closest candidate within a small edit distance, or "" (for
/// "did you mean 'X'?").
std::string closestMatch(std::string_view word,
                         const std::vector<std::string> &candidates);

/// Parses "512MiB", "4GiB", "1.5GB", "1000000", "64KB", "64k"; nullopt if bad.
std::optional<int64_t> parseByteSize(std::string_view text);
/// Renders bytes as "4GiB", "512MiB", "1000B".
std::string formatByteSize(int64_t bytes);

/// Renders the registry as Markdown (docs/ops.md and `sluice ops`).
std::string renderOpsMarkdown();

} // namespace sluice

#endif // SLUICE_OPS_REGISTRY_H
