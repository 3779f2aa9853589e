// vlpar-data (tools/vlpar_data/): the demo answers by their definitions on hand-built images; the summed-area
// tables against direct sums; make-demo end to end on synthetic photographs (every stored answer recomputed from
// the decoded JPEG through the library's Energon reader, exact balance, margins, byte-identical output for 1 and 3
// threads, --overwrite); and the CLI: convert (ShareGPT JSON + images -> shards, skips counted), inspect, stats and
// usage errors, run as a user would.
// Run: ./build/cpu/tools/test_vlpar_data
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "demo_tasks.hpp"
#include "make_demo.hpp"
#include "vlpar/data/energon.hpp"
#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/image_encode.hpp"
#include "vlpar/data/webdataset.hpp"

namespace vlpar::tools {
namespace {

namespace fs = std::filesystem;
using data::Image;

class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = (fs::temp_directory_path() / fmt::format("vlpar_tool_{}_{}", name, ::getpid())).string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void fill(Image& im, Rect r, uint8_t red, uint8_t green, uint8_t blue) {
  for (int64_t y = r.y; y < r.y + r.h; ++y)
    for (int64_t x = r.x; x < r.x + r.w; ++x) {
      uint8_t* p = im.row(y) + 3 * x;
      p[0] = red;
      p[1] = green;
      p[2] = blue;
    }
}

// ---- definitions -------------------------------------------------------------------------------------------

TEST(DemoTasks, BrightnessHalvesByDefinition) {
  Image im = Image::zeros(9, 4);  // odd width: column 4 belongs to neither half
  fill(im, Rect{0, 0, 4, 4}, 100, 100, 100);
  fill(im, Rect{4, 0, 1, 4}, 255, 255, 255);
  fill(im, Rect{5, 0, 4, 4}, 40, 40, 40);
  auto a = answer_for(im, QuestionType::kBrighterLR, Quadrant::kTopLeft);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(question_specs()[0].answers[size_t(a.value().index)], "left");
  EXPECT_NEAR(a.value().margin, 60.0 / 255.0, 1e-12);
  // Mirrored: right; luma weights: pure green (0.587·200) beats pure red (0.299·200).
  Image g = Image::zeros(8, 6);
  fill(g, Rect{0, 0, 8, 3}, 200, 0, 0);
  fill(g, Rect{0, 3, 8, 3}, 0, 200, 0);
  auto b = answer_for(g, QuestionType::kBrighterTB, Quadrant::kTopLeft);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(question_specs()[1].answers[size_t(b.value().index)], "bottom");
  EXPECT_NEAR(b.value().margin, (0.587 - 0.299) * 200.0 / 255.0, 1e-12);
}

TEST(DemoTasks, ColourOfEachQuarter) {
  Image im = Image::zeros(10, 7);  // odd height: row 3 is in no quarter
  fill(im, Rect{0, 0, 5, 3}, 200, 50, 40);    // top-left red
  fill(im, Rect{5, 0, 5, 3}, 30, 90, 200);    // top-right blue
  fill(im, Rect{0, 3, 10, 1}, 0, 255, 0);     // middle row: must not count
  fill(im, Rect{0, 4, 5, 3}, 20, 180, 100);   // bottom-left green
  fill(im, Rect{5, 4, 5, 3}, 120, 100, 110);  // bottom-right red by a small margin
  const std::vector<std::pair<Quadrant, std::pair<std::string, double>>> want = {
      {Quadrant::kTopLeft, {"red", 150.0 / 255}},
      {Quadrant::kTopRight, {"blue", 110.0 / 255}},
      {Quadrant::kBottomLeft, {"green", 80.0 / 255}},
      {Quadrant::kBottomRight, {"red", 10.0 / 255}}};
  for (const auto& [q, w] : want) {
    auto a = answer_for(im, QuestionType::kColour, q);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(question_specs()[3].answers[size_t(a.value().index)], w.first) << quadrant_name(q);
    EXPECT_NEAR(a.value().margin, w.second, 1e-12) << quadrant_name(q);
  }
  EXPECT_EQ(question_text(QuestionType::kColour, Quadrant::kBottomRight),
            "Which colour dominates the bottom-right quarter of the picture: red, green or blue?");
}

TEST(DemoTasks, OrientationFollowsTheProcessorGrid) {
  const OrientationConfig cfg;  // factor 32, 64²..160² pixels
  struct Case {
    int64_t w, h;
    std::string answer;
    double margin;
  };
  // 150x100 -> smart_resize 160x96 (h 100/32 = 3.125 -> 3); 80x112 -> 64x128 (2.5 rounds to even 2, 3.5 to 4);
  // 100x90 -> 96x96: square grid, margin 0 (the generator rejects such samples).
  for (const Case& c : {Case{150, 100, "wider", 160.0 / 96 - 1}, Case{80, 112, "taller", 1.0},
                        Case{100, 90, "taller", 0.0}}) {
    auto a = answer_for(Image::zeros(c.w, c.h), QuestionType::kOrientation, Quadrant::kTopLeft, cfg);
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_NEAR(a.value().margin, c.margin, 1e-12) << c.w << "x" << c.h;
    if (c.margin > 0) {
      EXPECT_EQ(question_specs()[2].answers[size_t(a.value().index)], c.answer) << c.w << "x" << c.h;
    }
  }
}

TEST(DemoTasks, IntegralImageEqualsDirectSums) {
  Image im = Image::zeros(37, 23);
  uint32_t x = 12345;
  for (auto& v : im.rgb) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(x >> 24);
  }
  const IntegralImage ii(im);
  for (int i = 0; i < 200; ++i) {
    x = x * 1664525u + 1013904223u;
    Rect r;
    r.w = 1 + (x >> 8) % 37;
    r.h = 1 + (x >> 16) % 23;
    r.x = (x >> 4) % (37 - r.w + 1);
    r.y = (x >> 20) % (23 - r.h + 1);
    const RegionMeans a = ii.means(r), b = region_means(im, r);
    ASSERT_EQ(a.r, b.r);
    ASSERT_EQ(a.g, b.g);
    ASSERT_EQ(a.b, b.b);
  }
  const RegionMeans all = ii.means(Rect{0, 0, 37, 23});
  EXPECT_GT(all.r, 0.0);  // not vacuous
}

// ---- make-demo end to end ----------------------------------------------------------------------------------

// Synthetic "photographs": blocks of saturated colours over brightness gradients, so every answer occurs.
std::vector<std::string> write_photos(const std::string& dir) {
  std::vector<std::string> paths;
  for (int p = 0; p < 3; ++p) {
    Image im = Image::zeros(640 - 80 * p, 420 + 60 * p);
    for (int64_t y = 0; y < im.height; ++y)
      for (int64_t xx = 0; xx < im.width; ++xx) {
        uint8_t* px = im.row(y) + 3 * xx;
        const int v = static_cast<int>((p == 1 ? y * 255 / im.height : xx * 255 / im.width));
        px[0] = px[1] = px[2] = static_cast<uint8_t>(v);
      }
    const int64_t bw = im.width / 4, bh = im.height / 3;
    fill(im, Rect{0, 0, bw, bh}, 220, 40, 30);
    fill(im, Rect{bw, bh, bw, bh}, 30, 200, 60);
    fill(im, Rect{2 * bw, 2 * bh, bw, bh}, 40, 60, 230);
    fill(im, Rect{3 * bw, 0, bw, bh}, 30, 190, 40);
    const std::string path = fmt::format("{}/photo{}.{}", dir, p, p == 2 ? "png" : "jpg");
    auto enc = p == 2 ? data::encode_png(im) : data::encode_jpeg(im);
    EXPECT_TRUE(enc.ok());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(enc.value().data()),
                                                static_cast<std::streamsize>(enc.value().size()));
    paths.push_back(path);
  }
  return paths;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(MakeDemo, AnswersMatchThePixelsBalancedAndDeterministic) {
  TempDir dir("demo");
  DemoOptions o;
  o.photos = write_photos(dir.path());
  o.out = dir.path() + "/ds1";
  o.train_samples = 48;
  o.val_samples = 16;
  o.shard_size = 20;
  o.threads = 1;
  o.progress = false;
  o.work_long_side = 400;
  auto rep = make_demo(o);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  EXPECT_EQ(rep.value().train.shards, 3);
  EXPECT_NEAR(rep.value().chance_overall, (3 * 0.5 * 4 + 4.0 / 3.0) / 16.0, 1e-12);

  for (const std::string split : {"train", "val"}) {
    auto ds = data::open_energon_dataset(o.out, {.split_part = split});
    ASSERT_TRUE(ds.ok()) << ds.status().message();
    const int64_t n = split == "train" ? 48 : 16;
    ASSERT_EQ(ds.value().num_samples(), n);
    std::map<std::string, std::map<std::string, int>> counts;
    for (const data::EnergonShard& sh : ds.value().shards) {
      auto reader = data::ShardReader::open(sh.path, sh.name, sh.offsets);
      ASSERT_TRUE(reader.ok());
      for (int64_t i = 0; i < reader.value().num_samples(); ++i) {
        auto r = reader.value().read(i);
        ASSERT_TRUE(r.ok() && !r.value().skipped());
        const data::Sample& s = r.value().sample;
        ASSERT_EQ(s.fields.size(), 2u) << s.key;
        const data::SampleField* jpg = s.field("jpg");
        const data::SampleField* js = s.field("json");
        ASSERT_TRUE(jpg != nullptr && js != nullptr) << s.key;
        const nlohmann::json rec = nlohmann::json::parse(js->data.begin(), js->data.end());
        EXPECT_EQ(rec["id"], s.key);
        const std::string q = rec["conversations"][0]["value"], ans = rec["conversations"][1]["value"];
        EXPECT_EQ(rec["conversations"][0]["from"], "human");
        EXPECT_EQ(rec["conversations"][1]["from"], "gpt");
        ASSERT_TRUE(q.starts_with("<image>\n")) << q;
        const std::string type = rec["question_type"];
        int t = -1;
        for (int k = 0; k < kNumQuestionTypes; ++k)
          if (question_specs()[size_t(k)].name == type) t = k;
        ASSERT_GE(t, 0) << type;
        Quadrant quad = Quadrant::kTopLeft;
        for (int k = 0; k < 4; ++k)
          if (q.find(quadrant_name(Quadrant(k))) != std::string::npos) quad = Quadrant(k);
        EXPECT_EQ(q.substr(8), question_text(QuestionType(t), quad));
        auto im = data::decode_image(jpg->data, s.key);
        ASSERT_TRUE(im.ok());
        EXPECT_GE(std::min(im.value().width, im.value().height), o.min_side);
        EXPECT_LE(std::max(im.value().width, im.value().height), o.max_side);
        auto a = answer_for(im.value(), QuestionType(t), quad, o.orientation);
        ASSERT_TRUE(a.ok());
        EXPECT_EQ(question_specs()[size_t(t)].answers[size_t(a.value().index)], ans) << s.key << " " << q;
        const double need = t == 2 ? o.thresholds.orientation : t == 3 ? o.thresholds.colour : o.thresholds.brightness;
        EXPECT_GE(a.value().margin, need) << s.key;
        EXPECT_NEAR(rec["answer_margin"].get<double>(), a.value().margin, 1e-4) << s.key;
        ++counts[type][ans];
      }
    }
    // Exact balance: n/4 per type, answers in turn.
    for (int t = 0; t < kNumQuestionTypes; ++t) {
      const QuestionSpec& spec = question_specs()[size_t(t)];
      int per_type = 0;
      for (const std::string& ans : spec.answers) {
        const int c = counts[spec.name][ans];
        per_type += c;
        EXPECT_LE(std::abs(c * int(spec.answers.size()) - int(n / 4)), int(spec.answers.size())) << spec.name << ans;
      }
      EXPECT_EQ(per_type, n / 4) << spec.name;
    }
  }
  const nlohmann::json meta = nlohmann::json::parse(read_file(o.out + "/demo_meta.json"));
  EXPECT_EQ(meta["question_types"].size(), 4u);
  EXPECT_EQ(meta["question_types"][3]["answers"], nlohmann::json::array({"red", "green", "blue"}));
  EXPECT_NEAR(meta["chance_overall_val"].get<double>(), rep.value().chance_overall, 1e-12);

  // Same bytes with 3 threads and the photographs listed in another order; an existing dataset needs --overwrite.
  DemoOptions o3 = o;
  o3.threads = 3;
  std::reverse(o3.photos.begin(), o3.photos.end());
  o3.out = dir.path() + "/ds3";
  ASSERT_TRUE(make_demo(o3).ok());
  for (const char* f : {"train-000000.tar", "train-000002.tar", "val-000000.tar", "train-000001.tar.idx"})
    EXPECT_TRUE(read_file(o.out + "/" + f) == read_file(o3.out + "/" + f)) << f;
  auto again = make_demo(o3);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("--overwrite"), std::string::npos) << again.status().message();
  o3.overwrite = true;
  o3.train_samples = 8;  // fewer shards: the old ones must be gone
  ASSERT_TRUE(make_demo(o3).ok());
  EXPECT_FALSE(fs::exists(o3.out + "/train-000001.tar"));
  EXPECT_TRUE(fs::exists(o3.out + "/train-000000.tar"));

  // A different seed gives different samples.
  DemoOptions os = o;
  os.seed = 7;
  os.out = dir.path() + "/ds7";
  ASSERT_TRUE(make_demo(os).ok());
  EXPECT_FALSE(read_file(o.out + "/val-000000.tar") == read_file(os.out + "/val-000000.tar"));
}

TEST(MakeDemo, ImpossibleRequestsFailWithANamedSample) {
  TempDir dir("impossible");
  // A uniform grey photograph has no brighter half and no dominant colour.
  Image grey = Image::zeros(400, 300);
  fill(grey, Rect{0, 0, 400, 300}, 128, 128, 128);
  const std::string path = dir.path() + "/grey.png";
  auto enc = data::encode_png(grey);
  ASSERT_TRUE(enc.ok());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(enc.value().data()),
                                              static_cast<std::streamsize>(enc.value().size()));
  DemoOptions o;
  o.photos = {path};
  o.out = dir.path() + "/ds";
  o.train_samples = 4;
  o.val_samples = 4;
  o.progress = false;
  o.max_attempts = 50;
  auto r = make_demo(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no crop"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(o.out + "/.nv-meta/.info.json"));

  o.photos = {dir.path() + "/missing.jpg"};
  auto m = make_demo(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing.jpg"), std::string::npos) << m.status().message();
  o.photos = {path};
  o.max_side = 8;
  EXPECT_FALSE(make_demo(o).ok());
}

// ---- the CLI -----------------------------------------------------------------------------------------------

std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

TEST(VlparDataCli, ConvertInspectStats) {
  TempDir dir("cli");
  const std::string tool = VLPAR_DATA_TOOL;
  fs::create_directories(dir.path() + "/img/sub");
  Image a = Image::zeros(40, 30), b = Image::zeros(20, 50);
  fill(a, Rect{0, 0, 20, 30}, 250, 10, 10);
  const auto ja = data::encode_jpeg(a).value(), pb = data::encode_png(b).value();
  std::ofstream(dir.path() + "/img/a.jpg", std::ios::binary).write(reinterpret_cast<const char*>(ja.data()), long(ja.size()));
  // A PNG under a .jpg name: the member extension follows the content.
  std::ofstream(dir.path() + "/img/sub/b.jpg", std::ios::binary).write(reinterpret_cast<const char*>(pb.data()), long(pb.size()));
  std::ofstream(dir.path() + "/img/text.jpg") << "not an image";
  {
    nlohmann::json recs = nlohmann::json::array();
    auto turn = [](const char* from, const char* value) { return nlohmann::json{{"from", from}, {"value", value}}; };
    recs.push_back({{"id", "r0"}, {"image", "a.jpg"},
                    {"conversations", {turn("human", "<image>\nWhat is left?"), turn("gpt", "red")}}});
    recs.push_back({{"id", "r1"}, {"images", {"a.jpg", "sub/b.jpg"}},
                    {"conversations", {turn("human", "<image><image>\nCompare."), turn("gpt", "ok")}}});
    recs.push_back({{"id", "r2"}, {"image", "nope.jpg"}, {"conversations", {turn("human", "<image>\nx"), turn("gpt", "y")}}});
    recs.push_back({{"id", "r3"}, {"image", "text.jpg"}, {"conversations", {turn("human", "<image>\nx"), turn("gpt", "y")}}});
    recs.push_back({{"id", "r4"}, {"conversations", {turn("human", "Text only?"), turn("gpt", "yes")}}});
    recs.push_back({{"id", "r5"}});
    std::ofstream(dir.path() + "/data.json") << recs.dump();
  }
  const std::string out = dir.path() + "/ds";
  auto [rc, text] = run(fmt::format("'{}' convert --json '{}/data.json' --images '{}/img' --out '{}' --shard-size 2 "
                                    "--val-fraction 0.3 --no-progress",
                                    tool, dir.path(), dir.path(), out));
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("6 records -> "), std::string::npos) << text;
  EXPECT_NE(text.find("skipped 3: 1 bad records, 1 missing images, 1 not JPEG/PNG"), std::string::npos) << text;

  // Read everything back through the library: 3 samples over train + val, fields as documented.
  std::map<std::string, data::Sample> got;
  for (const std::string part : {"train", "val"}) {
    auto ds = data::open_energon_dataset(out, {.split_part = part});
    ASSERT_TRUE(ds.ok()) << ds.status().message();
    for (const data::EnergonShard& sh : ds.value().shards) {
      auto reader = data::ShardReader::open(sh.path, sh.name, sh.offsets);
      ASSERT_TRUE(reader.ok());
      for (int64_t i = 0; i < reader.value().num_samples(); ++i) {
        auto r = reader.value().read(i);
        ASSERT_TRUE(r.ok() && !r.value().skipped());
        got[r.value().sample.key] = r.value().sample;
      }
    }
  }
  ASSERT_EQ(got.size(), 3u);
  const data::Sample& s0 = got.at("000000000");
  ASSERT_NE(s0.field("jpg"), nullptr);
  EXPECT_TRUE(s0.field("jpg")->data == ja);
  const nlohmann::json r0 = nlohmann::json::parse(s0.field("json")->data.begin(), s0.field("json")->data.end());
  EXPECT_EQ(r0["id"], "r0");
  EXPECT_FALSE(r0.contains("image"));
  const data::Sample& s1 = got.at("000000001");
  ASSERT_NE(s1.field("0.jpg"), nullptr);
  ASSERT_NE(s1.field("1.png"), nullptr);
  EXPECT_TRUE(s1.field("1.png")->data == pb);
  EXPECT_EQ(got.at("000000004").fields.size(), 1u);  // text only: just the record

  // inspect and stats on what convert wrote.
  auto [rc2, insp] = run(fmt::format("'{}' inspect '{}/train-000000.tar' --decode", tool, out));
  ASSERT_EQ(rc2, 0) << insp;
  EXPECT_NE(insp.find("matches the headers"), std::string::npos) << insp;
  auto [rc3, st] = run(fmt::format("'{}' stats '{}'", tool, out));
  ASSERT_EQ(rc3, 0) << st;
  EXPECT_NE(st.find("== train"), std::string::npos) << st;
  EXPECT_NE(st.find("image width"), std::string::npos) << st;

  // Usage errors name the problem.
  auto [rc4, u1] = run(fmt::format("'{}' convert --json x.json", tool));
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(u1.find("required"), std::string::npos) << u1;
  auto [rc5, u2] = run(fmt::format("'{}' frobnicate", tool));
  EXPECT_EQ(rc5, 2);
  EXPECT_NE(u2.find("unknown command"), std::string::npos) << u2;
  auto [rc6, u3] = run(fmt::format("'{}' make-demo --out '{}/d' --bogus 1", tool, dir.path()));
  EXPECT_EQ(rc6, 1);
  EXPECT_NE(u3.find("unknown option --bogus"), std::string::npos) << u3;
}

}  // namespace
}  // namespace vlpar::tools
