//===- source_fuzzer.cpp - libFuzzer targets for the data readers ---------===//
//
// One file, compiled once per reader (SLUICE_FUZZ_FORMAT selects it): the
// input bytes become a data file, a spec naming it (with `on_error: skip`)
// is checked by the front end, and every record of every shard is read.
// Whatever the bytes, the reader must return records or located errors: no
// crash, no hang, no allocation beyond the budget, no uncaught exception.
// The Example target frames the input as one valid TFRecord record (correct
// CRCs), so the fuzzer reaches the protobuf parser instead of stopping at
// the framing checksums; the tfrecord target fuzzes the framing itself.
//
//===----------------------------------------------------------------------===//
#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Source.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace sluice;

namespace {

struct Format {
  const char *file;   ///< data file name
  const char *source; ///< the spec's `source:` mapping (YAML)
};

#define SLUICE_FMT_csv                                                         \
  {"data.csv",                                                                 \
   "csv: {files: data.csv, on_error: skip, columns: [{name: a, type: i64}, "   \
   "{name: b, type: f32, count: 2}, {name: c, type: string}, {name: d, type: " \
   "hex32}]}"}
#define SLUICE_FMT_tsv                                                         \
  {"data.tsv",                                                                 \
   "tsv: {files: data.tsv, header: true, on_error: skip, encoding: replace, "  \
   "columns: [{name: a, type: u8}, {name: s, type: string}, {name: x, type: "  \
   "f64}]}"}
#define SLUICE_FMT_tfrecord                                                    \
  {"data.tfrecord",                                                            \
   "tfrecord: {files: data.tfrecord, on_error: skip, features: [{name: x, "    \
   "type: i64}, {name: v, type: f32, shape: [-1]}, {name: s, type: bytes}]}"}
#define SLUICE_FMT_example SLUICE_FMT_tfrecord
#define SLUICE_FMT_idx {"data.idx", "idx: {images: data.idx, on_error: skip}"}
#define SLUICE_FMT_npy {"data.npy", "npy: {files: data.npy, on_error: skip}"}
#define SLUICE_FMT_webdataset                                                  \
  {"data.tar",                                                                 \
   "webdataset: {shards: data.tar, on_error: skip, fields: [{ext: jpg}, "      \
   "{ext: cls, type: i64}, {ext: txt, type: string}]}"}
#define SLUICE_FMT_text                                                        \
  {"data.txt", "text_lines: {files: data.txt, on_error: skip}"}

#define SLUICE_CAT(a, b) a##b
#define SLUICE_FMT(x) SLUICE_CAT(SLUICE_FMT_, x)
const Format kFormat = SLUICE_FMT(SLUICE_FUZZ_FORMAT);

/// A private directory for this process's data file and spec.
const std::string &workDir() {
  static const std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string t =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/sluice-fuzz-XXXXXX";
    if (!::mkdtemp(t.data()))
      std::abort();
    return t;
  }();
  return dir;
}

void put32(std::string &s, uint32_t v) {
  s.append(reinterpret_cast<char *>(&v), 4);
}
void put64(std::string &s, uint64_t v) {
  s.append(reinterpret_cast<char *>(&v), 8);
}

/// `payload` as one TFRecord record with correct CRCs.
std::string frame(std::string_view payload) {
  std::string out;
  put64(out, payload.size());
  put32(out, runtime::maskedCrc32c(out.data(), 8));
  out.append(payload);
  put32(out, runtime::maskedCrc32c(payload.data(), payload.size()));
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
#ifdef SLUICE_FUZZ_EXAMPLE
  bytes = frame(bytes);
#endif
  const std::string &dir = workDir();
  std::string path = dir + "/" + kFormat.file;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string yaml =
      std::string("pipeline: fuzz\nsource:\n  ") + kFormat.source + "\n";
  dsl::DiagnosticEngine diags(dir + "/spec.yaml", yaml);
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  if (!spec) {
    std::ostringstream os;
    diags.print(os);
    if (os.str().find("error:") == std::string::npos)
      std::abort(); // a refusal must say why
    return 0;
  }
  Expected<std::unique_ptr<runtime::Source>> src = runtime::Source::create(
      spec->source.op, spec->source.params, spec->source.outputType, dir);
  if (!src) {
    if (src.status().message().empty())
      std::abort();
    return 0;
  }
  for (size_t i = 0; i < (*src)->numShards(); ++i) {
    std::unique_ptr<runtime::ShardReader> r = (*src)->open(i);
    Record rec;
    // Bounded: a reader must make progress on every call.
    for (int n = 0; n < 100000; ++n) {
      runtime::ReadResult rr = r->next(rec);
      if (rr.isEnd())
        break;
      if (rr.isError() && rr.error().message().empty())
        std::abort();
    }
  }
  return 0;
}
