//===- dsl_test.cpp - The YAML front end: specs, diagnostics, budgets
//------===//
#include "sluice/dsl/Spec.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace sluice;
using namespace sluice::dsl;

namespace {

struct Parsed {
  std::unique_ptr<Spec> spec;
  std::vector<Diagnostic> diags;
  std::string printed;
};

Parsed parse(const std::string &text, const std::string &file = "t.yaml") {
  DiagnosticEngine d(file, text);
  Parsed p;
  p.spec = parseSpec(d);
  p.diags = d.diagnostics();
  std::ostringstream os;
  d.print(os);
  p.printed = os.str();
  return p;
}

const char *kImagenet = R"(pipeline: imagenet_train
seed: 42
source:
  image_folder: {root: data/train}
steps:
  - decode_image: {field: data, as: image}
  - random_resized_crop: {field: image, size: [224, 224]}
  - random_flip: {field: image}
  - normalize: {field: image, mean: [123.675, 116.28, 103.53], std: [58.395, 57.12, 57.375]}
  - transpose: {field: image, to: CHW}
  - select: [image, label]
  - shuffle: 4096
  - batch: {size: 128, drop_remainder: true}
budget: {cores: 3, memory: 4GiB}
schedule:
  decode_image: {parallelism: 2, prefetch: 4}
  default: {prefetch: 3}
)";

TEST(Spec, ParsesTheDesignExample) {
  Parsed p = parse(kImagenet);
  ASSERT_TRUE(p.spec) << p.printed;
  const Spec &s = *p.spec;
  EXPECT_EQ(s.pipeline, "imagenet_train");
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.epochs, 1);
  EXPECT_EQ(s.source.op, "image_folder");
  ASSERT_EQ(s.steps.size(), 8u);
  EXPECT_EQ(s.outputType().str(), "image: f32[128,3,224,224], label: i64[128]");
  EXPECT_EQ(s.budget.cores, 3);
  EXPECT_EQ(s.budget.memoryBytes, int64_t(4) << 30);
  EXPECT_FALSE(s.scheduleAuto);
  ASSERT_TRUE(s.schedule.count("decode_image"));
  EXPECT_EQ(*s.schedule.at("decode_image").parallelism, 2);
  EXPECT_EQ(*s.schedule.at("decode_image").prefetch, 4);
  EXPECT_EQ(*s.schedule.at("default").prefetch, 3);
}

TEST(Spec, FillsDefaultsAndShorthands) {
  Parsed p = parse(kImagenet);
  ASSERT_TRUE(p.spec) << p.printed;
  const Step &flip = p.spec->steps[2];
  EXPECT_EQ(flip.params["p"].asDouble(), 0.5);
  EXPECT_EQ(flip.params["axis"].asString(), "width");
  const Step &shuffle = p.spec->steps[6];
  EXPECT_EQ(shuffle.params["buffer"].asInt(), 4096);
  EXPECT_EQ(p.spec->steps[5].params["fields"].asStringList(),
            (std::vector<std::string>{"image", "label"}));
  // Parameter values remember where they were written.
  EXPECT_EQ(shuffle.params["buffer"].loc().line, 12);
  EXPECT_EQ(shuffle.params["buffer"].loc().col, 14);
}

TEST(Spec, SeedsUseTheWholeUnsignedRange) {
  Parsed p = parse("pipeline: t\nseed: 18446744073709551615\n"
                   "source: {text_lines: {files: a.txt}}\n");
  ASSERT_TRUE(p.spec) << p.printed;
  EXPECT_EQ(p.spec->seed, 18446744073709551615ull);
}

TEST(Spec, NamesRepeatedOpsUniquely) {
  Parsed p = parse(R"(pipeline: t
source: {csv: {files: a.csv, columns: [{name: x, type: f32}]}}
steps:
  - map: {field: x, expr: "x + 1"}
  - map: {field: x, expr: "x * 2"}
  - map: {field: x, expr: "x - 3"}
)");
  ASSERT_TRUE(p.spec) << p.printed;
  EXPECT_EQ(p.spec->steps[0].name, "map");
  EXPECT_EQ(p.spec->steps[1].name, "map.2");
  EXPECT_EQ(p.spec->steps[2].name, "map.3");
}

TEST(Diagnostics, ReportsEveryIndependentMistake) {
  Parsed p = parse(R"(pipeline: t
source: {image_folder: {root: d}}
steps:
  - decode_imgae: {field: data, as: image}
  - shuffle: {buffer: -1}
  - batch: {size: 0}
budget: {memory: lots}
)");
  EXPECT_FALSE(p.spec);
  ASSERT_EQ(p.diags.size(), 4u) << p.printed;
  EXPECT_EQ(p.diags[0].loc.line, 4);
  EXPECT_EQ(p.diags[0].loc.col, 5);
  EXPECT_NE(p.diags[0].message.find("did you mean 'decode_image'?"),
            std::string::npos);
  EXPECT_EQ(p.diags[1].loc.line, 5);
  EXPECT_EQ(p.diags[2].loc.line, 6);
  EXPECT_EQ(p.diags[3].loc.line, 7);
}

TEST(Diagnostics, OneBadStepDoesNotCascade) {
  // decode_image fails (no such field), so `image` never exists; the later
  // steps that use it must not each report "no field 'image'".
  Parsed p = parse(R"(pipeline: t
source: {image_folder: {root: d}}
steps:
  - decode_image: {field: dta, as: image}
  - center_crop: {field: image, size: 224}
  - normalize: {field: image, mean: 0, std: 1}
  - batch: 8
)");
  EXPECT_FALSE(p.spec);
  ASSERT_EQ(p.diags.size(), 1u) << p.printed;
  EXPECT_NE(p.diags[0].message.find("did you mean 'data'?"), std::string::npos);
}

TEST(Diagnostics, PrintsSourceLineAndCaret) {
  Parsed p = parse("pipeline: t\nsource: {text_lines: {files: a.txt}}\n"
                   "steps:\n  - shufle: 10\n");
  EXPECT_EQ(p.printed.substr(0, p.printed.find('\n')),
            "t.yaml:4:5: error: unknown op 'shufle'; did you mean 'shuffle'?");
  EXPECT_NE(p.printed.find("\n    - shufle: 10\n      ^\n"), std::string::npos)
      << p.printed;
}

struct BadSpecCase {
  const char *name;
  const char *text;
  int line, col;
  const char *message;
};

class BadSpecs : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(BadSpecs, ErrorAtTheRightPlace) {
  const BadSpecCase &c = GetParam();
  Parsed p = parse(c.text);
  EXPECT_FALSE(p.spec);
  ASSERT_FALSE(p.diags.empty());
  bool found = false;
  for (const auto &d : p.diags)
    if (d.loc.line == c.line && d.loc.col == c.col &&
        d.message.find(c.message) != std::string::npos)
      found = true;
  EXPECT_TRUE(found) << "expected " << c.line << ":" << c.col << " "
                     << c.message << "\ngot:\n"
                     << p.printed;
}

const char *kHead = "pipeline: t\nsource: {text_lines: {files: a.txt}}\n";

INSTANTIATE_TEST_SUITE_P(
    Corpus, BadSpecs,
    ::testing::Values(
        BadSpecCase{"empty", "", 1, 1, "the spec is empty"},
        BadSpecCase{"scalar", "hello", 1, 1, "must be a mapping"},
        BadSpecCase{"dupkey", "pipeline: a\npipeline: b\n", 2, 1,
                    "duplicate key 'pipeline'"},
        BadSpecCase{"nosource", "pipeline: a\nsteps: []\n", 1, 1,
                    "missing 'source'"},
        BadSpecCase{"sourcelist", "pipeline: a\nsource: [csv]\n", 2, 9,
                    "each source must be a mapping"},
        BadSpecCase{"stepsource", "pipeline: a\nsource: {batch: 3}\n", 2, 10,
                    "'batch' is a step, not a source"},
        BadSpecCase{"sourcestep",
                    "pipeline: a\nsource: {text_lines: {files: a}}\nsteps:\n  "
                    "- csv: {files: b}\n",
                    4, 5, "is a source"},
        BadSpecCase{"seedneg", "pipeline: a\nseed: -3\n", 2, 7,
                    "'seed' must be at least 0"},
        BadSpecCase{"seedhuge", "pipeline: a\nseed: 18446744073709551616\n", 2,
                    7, "'seed' must be below 2^64"},
        BadSpecCase{"epochs0", "pipeline: a\nepochs: 0\n", 2, 9,
                    "'epochs' must be at least 1"},
        BadSpecCase{"enum",
                    "pipeline: t\nsource: {image_folder: {root: d}}\nsteps:\n  "
                    "- decode_image: {field: data}\n  - random_flip: {field: "
                    "data, axis: widht}\n",
                    5, 38, "did you mean 'width'?"},
        BadSpecCase{"notalist",
                    "pipeline: t\nsource: {image_folder: {root: d, "
                    "extensions: {a: 1}}}\n",
                    2, 46, "must be a list"},
        BadSpecCase{
            "bool",
            "pipeline: t\nsource: {text_lines: {files: a.txt}}\nsteps:\n"
            "  - batch: {size: 2, drop_remainder: yes please}\n",
            4, 38, "must be true or false"},
        BadSpecCase{"schedulebad",
                    "pipeline: t\nsource: {text_lines: {files: a.txt}}\n"
                    "schedule: fast\n",
                    3, 11, "'schedule' must be 'auto'"},
        BadSpecCase{"budgetlist",
                    "pipeline: t\nsource: {text_lines: {files: a.txt}}\n"
                    "budget: [1, 2]\n",
                    3, 9, "'budget' must be a mapping"},
        BadSpecCase{"cores",
                    "pipeline: t\nsource: {text_lines: {files: a.txt}}\n"
                    "budget: {cores: many}\n",
                    3, 17, "'budget.cores' must be an integer"},
        BadSpecCase{"twodocs", "pipeline: a\n---\npipeline: b\n", 3, 1,
                    "more than one YAML document"}),
    [](const ::testing::TestParamInfo<BadSpecCase> &i) {
      return std::string(i.param.name);
    });

TEST(Diagnostics, JunkNeverCrashes) {
  // A few byte strings that have crashed YAML front ends elsewhere.
  const std::vector<std::string> junk = {std::string("\xff\xfe\x00\x01", 4),
                                         "{{{{{{{{",
                                         "]]]]",
                                         "- - - - -",
                                         "&a [*a, *a]",
                                         "? : ? :",
                                         "!!binary |\n  ####",
                                         "key: \"unterminated",
                                         "a: b: c",
                                         "\t- x",
                                         std::string(100000, '['),
                                         "x: " + std::string(5000, '{')};
  for (const auto &j : junk) {
    Parsed p = parse(j);
    EXPECT_FALSE(p.spec);
    EXPECT_FALSE(p.diags.empty());
  }
  (void)kHead;
}

} // namespace
