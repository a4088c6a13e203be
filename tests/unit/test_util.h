//===- test_util.h - Helpers shared by the unit tests ---------------------===//
//
// A temporary directory for the files a test writes (specs, data files), so
// the source and runtime tests make and clean them up the same way.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TESTS_UNIT_TEST_UTIL_H
#define SLUICE_TESTS_UNIT_TEST_UTIL_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <zlib.h>

namespace sluice::testing {

/// A fresh directory removed at the end of the test.
class TempDir {
public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "sluice-test-XXXXXX")
            .string();
    char *made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const std::string &path() const { return path_; }
  std::string operator/(const std::string &rel) const {
    return path_ + "/" + rel;
  }

  /// Writes `bytes` to path()/rel, creating parent directories.
  std::string write(const std::string &rel, const std::string &bytes) const {
    std::string full = *this / rel;
    std::filesystem::create_directories(
        std::filesystem::path(full).parent_path());
    std::ofstream out(full, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << full;
    return full;
  }
  /// Writes `bytes` gzip-compressed.
  std::string writeGz(const std::string &rel, const std::string &bytes) const {
    std::string full = *this / rel;
    std::filesystem::create_directories(
        std::filesystem::path(full).parent_path());
    gzFile f = gzopen(full.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
    return full;
  }

private:
  std::string path_;
};

/// The `source:` of a spec over Criteo-style day files (tab-separated:
/// label i64, 13 dense f32 cells into one field, 26 hex32 ids into one),
/// `files` a glob; `onError` (skip/fail) when not empty.
inline std::string criteoTsvSource(const std::string &files,
                                   const std::string &onError = "") {
  return "source:\n  tsv:\n    files: " + files + "\n" +
         (onError.empty() ? "" : "    on_error: " + onError + "\n") +
         "    columns:\n"
         "      - {name: label, type: i64}\n"
         "      - {name: dense, type: f32, count: 13}\n"
         "      - {name: cat, type: hex32, count: 26}\n";
}

} // namespace sluice::testing

#endif // SLUICE_TESTS_UNIT_TEST_UTIL_H
