//===- decode_only_bench.cpp - Plain libjpeg-turbo decode loop (baseline) -===//
//
// The "speed of light" for the image benchmark: read each JPEG of the
// benchmark data set from disk and decode it to interleaved RGB with
// tjDecompress2, nothing else. sluice's image pipeline does this and more
// (crop, flip, normalize, transpose, shuffle, batch), so its images/s over
// this loop's, at the same thread count, is the share of the hardware it
// keeps. Each thread has its own TurboJPEG handle and buffers and walks its
// own stride of the file list, as a hand-written loader would.
//
// Files: every *.jpg / *.jpeg under the directory given as the one
// non-benchmark argument, else under $SLUICE_BENCH_DATA/imagenet/train
// (default /tmp/sluice-bench-data); make them with bench/gen_data.py.
//   decode_only_bench [DIR] [--benchmark_* flags]
// Uses only TurboJPEG and Google Benchmark, so bench/run.sh can also build it
// on its own when the rest of the tree does not build.
//
//===----------------------------------------------------------------------===//

#include <benchmark/benchmark.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace {

/// Set from the command line; empty means the environment's default.
std::string &rootOverride() {
  static std::string root;
  return root;
}

std::string dataRoot() {
  if (!rootOverride().empty())
    return rootOverride();
  const char *env = std::getenv("SLUICE_BENCH_DATA");
  std::string base = env && *env ? env : "/tmp/sluice-bench-data";
  return base + "/imagenet/train";
}

bool isJpeg(const std::filesystem::path &p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg";
}

/// The data set's JPEG paths in sorted order (listed once per process).
const std::vector<std::string> &jpegFiles() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> out;
    std::error_code ec;
    std::filesystem::recursive_directory_iterator it(dataRoot(), ec), end;
    for (; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec) && isJpeg(it->path()))
        out.push_back(it->path().string());
    std::sort(out.begin(), out.end());
    return out;
  }();
  return files;
}

/// Reads a whole file into `buf`; false on any I/O error.
bool readFile(const std::string &path, std::vector<unsigned char> &buf) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return false;
  bool ok = std::fseek(f, 0, SEEK_END) == 0;
  long size = ok ? std::ftell(f) : -1;
  ok = ok && size >= 0 && std::fseek(f, 0, SEEK_SET) == 0;
  if (ok) {
    buf.resize(static_cast<size_t>(size));
    ok = std::fread(buf.data(), 1, buf.size(), f) == buf.size();
  }
  std::fclose(f);
  return ok;
}

/// One thread's decode loop: file i, i + T, i + 2T, ... wrapping around.
void BM_DecodeOnly(benchmark::State &state) {
  const std::vector<std::string> &files = jpegFiles();
  if (files.empty()) {
    state.SkipWithError(("no JPEGs under " + dataRoot() +
                         "; run bench/gen_data.py (or set SLUICE_BENCH_DATA)")
                            .c_str());
    return;
  }
  tjhandle tj = tjInitDecompress();
  if (!tj) {
    state.SkipWithError("tjInitDecompress failed");
    return;
  }
  std::vector<unsigned char> bytes, rgb;
  size_t next = static_cast<size_t>(state.thread_index());
  const size_t stride = static_cast<size_t>(state.threads());
  int64_t inBytes = 0, outBytes = 0;
  for (auto _ : state) {
    const std::string &path = files[next % files.size()];
    next += stride;
    if (!readFile(path, bytes)) {
      state.SkipWithError(("cannot read " + path).c_str());
      break;
    }
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj, bytes.data(), bytes.size(), &w, &h, &subsamp,
                            &colorspace) != 0) {
      state.SkipWithError((path + ": " + tjGetErrorStr2(tj)).c_str());
      break;
    }
    rgb.resize(static_cast<size_t>(w) * h * 3);
    if (tjDecompress2(tj, bytes.data(), bytes.size(), rgb.data(), w, w * 3, h,
                      TJPF_RGB, 0) != 0 &&
        tjGetErrorCode(tj) != TJERR_WARNING) {
      state.SkipWithError((path + ": " + tjGetErrorStr2(tj)).c_str());
      break;
    }
    benchmark::DoNotOptimize(rgb.data());
    inBytes += static_cast<int64_t>(bytes.size());
    outBytes += static_cast<int64_t>(rgb.size());
  }
  tjDestroy(tj);
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(inBytes);
  state.counters["decoded_MB"] = benchmark::Counter(
      static_cast<double>(outBytes) / 1e6, benchmark::Counter::kIsRate);
}

/// The thread counts to run: SLUICE_DECODE_THREADS ("1,2,4,8,16", what
/// bench/scaling.py passes up to the host's cores), else 1 and 2.
std::vector<int> threadCounts() {
  std::vector<int> out;
  const char *env = std::getenv("SLUICE_DECODE_THREADS");
  std::string list = env && *env ? env : "1,2";
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos)
      comma = list.size();
    int n = std::atoi(list.substr(start, comma - start).c_str());
    if (n > 0)
      out.push_back(n);
    start = comma + 1;
  }
  if (out.empty())
    out = {1, 2};
  return out;
}

} // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  // What Google Benchmark did not consume: at most the data directory.
  if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
    std::fprintf(stderr,
                 "decode_only_bench: unexpected argument '%s'\n"
                 "usage: decode_only_bench [DIR] [--benchmark_* flags]\n",
                 argv[argc - 1]);
    return 2;
  }
  if (argc == 2)
    rootOverride() = argv[1];
  // Real time, so that items/s with N threads is the combined throughput.
  benchmark::internal::Benchmark *b =
      benchmark::RegisterBenchmark("BM_DecodeOnly", BM_DecodeOnly);
  for (int n : threadCounts())
    b->Threads(n);
  b->UseRealTime();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
