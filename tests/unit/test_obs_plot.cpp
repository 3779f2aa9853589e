// plot_metrics_png: decode the PNG with libpng and find the curves of a synthetic linear series where the
// returned panel geometry says they must be.
// With VLPAR_OBS_PLOT_OUT=<file.png>, LinearSeriesLandsWhereExpected also writes a smoothed figure there to look at.
// Run: ./build/<dir>/tests/test_obs_plot
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "vlpar/obs/jsonl_writer.hpp"
#include "vlpar/obs/plot.hpp"

namespace fs = std::filesystem;
using namespace vlpar::obs;

namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;
  Rgb at(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3;
    return Rgb{rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

// libpng's simplified read API (no setjmp needed).
Image read_png(const std::string& path) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  Image out;
  if (!png_image_begin_read_from_file(&img, path.c_str())) {
    ADD_FAILURE() << "libpng cannot open " << path << ": " << img.message;
    return out;
  }
  img.format = PNG_FORMAT_RGB;
  out.w = static_cast<int>(img.width);
  out.h = static_cast<int>(img.height);
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) {
    ADD_FAILURE() << "libpng cannot decode " << path << ": " << img.message;
    out = Image{};
  }
  png_image_free(&img);
  return out;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("vlpar_obs_plot_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// loss = 10 - 0.008 * step, tokens/s = 1000 + 2 * step, steps 0..999 (a resumed run's duplicates included).
void write_linear(const std::string& path) {
  auto w = JsonlWriter::open(path, std::nullopt);
  ASSERT_TRUE(w.ok());
  for (int64_t s = 0; s < 1000; ++s) {
    MetricsLine m;
    m.step = s;
    m.loss = 10.0 - 0.008 * static_cast<double>(s);
    m.tokens_per_s = 1000.0 + 2.0 * static_cast<double>(s);
    if (s == 500) m.loss = NAN;  // a skipped step: null in the JSON, no point
    ASSERT_TRUE(w->append(m).ok());
  }
}

int count_color(const Image& img, const PlotPanel& p, Rgb c) {  // inside the frame
  int n = 0;
  for (int y = p.fy0; y <= p.fy1; ++y)
    for (int x = p.fx0; x <= p.fx1; ++x) n += img.at(x, y) == c;
  return n;
}

}  // namespace

TEST(Plot, LinearSeriesLandsWhereExpected) {
  TempDir tmp;
  const std::string jsonl = tmp.file("metrics.jsonl"), png = tmp.file("curves.png");
  write_linear(jsonl);
  PlotOptions opt;
  opt.width = 800;
  opt.height = 600;
  opt.smoothing = 0.0;
  PlotInfo info;
  const vlpar::Status st = plot_metrics_png(jsonl, png, opt, &info);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const Image img = read_png(png);
  ASSERT_EQ(img.w, 800);
  ASSERT_EQ(img.h, 600);
  const PlotPanel& L = info.loss;
  const PlotPanel& T = info.throughput;
  EXPECT_EQ(L.points, 999);  // step 500 was null
  EXPECT_EQ(T.points, 1000);
  EXPECT_EQ(L.xmin, 0.0);
  EXPECT_EQ(L.xmax, 999.0);
  EXPECT_LT(L.y1, T.y0);  // loss above throughput
  EXPECT_GT(L.x1 - L.x0, 500);
  // y range = data range padded by 5%.
  EXPECT_NEAR(L.ymin, 2.008 - 0.05 * 7.992, 1e-9);
  EXPECT_NEAR(L.ymax, 10.0 + 0.05 * 7.992, 1e-9);
  // Independent of the mapping: larger values are drawn higher, and the ends of the padded range sit on the edges of
  // the data area.
  EXPECT_EQ(L.py(L.ymax), L.y0);
  EXPECT_EQ(L.py(L.ymin), L.y1);
  EXPECT_EQ(L.px(L.xmin), L.x0);
  EXPECT_EQ(L.px(L.xmax), L.x1);
  {
    auto first_loss_row = [&](int x) {
      for (int y = L.fy0 + 1; y < L.fy1; ++y)
        if (img.at(x, y) == opt.loss_raw) return y;
      return -1;
    };
    const int h = L.y1 - L.y0;
    const int top = first_loss_row(L.x0), bottom = first_loss_row(L.x1);
    EXPECT_NEAR(top, L.y0 + 0.05 / 1.1 * h, 2.0);     // loss 10 at step 0: 5% below the top
    EXPECT_NEAR(bottom, L.y1 - 0.05 / 1.1 * h, 3.0);  // loss 2.008 at step 999: 5% above the bottom
  }
  // Every data point is drawn at its mapped pixel.
  for (int64_t s = 0; s < 1000; s += 37) {
    if (s == 500) continue;
    const double loss = 10.0 - 0.008 * static_cast<double>(s), tps = 1000.0 + 2.0 * static_cast<double>(s);
    EXPECT_EQ(img.at(L.px(static_cast<double>(s)), L.py(loss)), opt.loss_raw) << "loss at step " << s;
    EXPECT_EQ(img.at(T.px(static_cast<double>(s)), T.py(tps)), opt.throughput) << "tokens/s at step " << s;
    // ... and nowhere far from the line in that column.
    for (int y = L.fy0 + 1; y < L.fy1; ++y)
      if (std::abs(y - L.py(loss)) > 3) {
        EXPECT_NE(img.at(L.px(static_cast<double>(s)), y), opt.loss_raw) << s << "," << y;
      }
  }
  // The line is continuous: every column between the end points has curve pixels.
  for (int x = L.px(0.0); x <= L.px(999.0) - 1; ++x) {
    bool hit = false;
    for (int y = L.fy0 + 1; y < L.fy1 && !hit; ++y) hit = img.at(x, y) == opt.loss_raw;
    EXPECT_TRUE(hit) << "no loss pixel in column " << x;
  }
  EXPECT_EQ(count_color(img, T, opt.loss_raw), 0);
  EXPECT_EQ(count_color(img, L, opt.throughput), 0);
  EXPECT_EQ(count_color(img, L, opt.loss_smooth), 0);  // smoothing off
  // Axes and tick labels exist: axis-coloured frame, text-coloured pixels left of the loss panel.
  EXPECT_EQ(img.at(L.fx0, (L.y0 + L.y1) / 2), opt.axis);
  EXPECT_EQ(L.x0 - L.fx0, kPlotInset);
  int text_px = 0;
  for (int y = L.y0; y <= L.y1; ++y)
    for (int x = 0; x < L.fx0 - 6; ++x) text_px += img.at(x, y) == opt.text;
  EXPECT_GT(text_px, 100);

  // A noisy, decaying loss with smoothing: the overlay appears.
  {
    auto w = JsonlWriter::open(tmp.file("noisy.jsonl"), std::nullopt);
    ASSERT_TRUE(w.ok());
    for (int64_t s = 1; s <= 600; ++s) {
      MetricsLine m;
      m.step = s;
      const double t = static_cast<double>(s);
      m.loss = 2.0 + 8.0 * std::exp(-t / 120.0) + 0.6 * std::sin(t * 1.7) * std::cos(t * 0.31);
      m.tokens_per_s = 41000.0 + 3000.0 * std::sin(t * 0.9) - (s % 100 == 0 ? 20000.0 : 0.0);  // checkpoint dips
      ASSERT_TRUE(w->append(m).ok());
    }
  }
  opt.smoothing = 0.9;
  opt.title = "qwen3vl tiny demo";
  const char* keep = std::getenv("VLPAR_OBS_PLOT_OUT");
  const std::string png2 = keep != nullptr ? std::string(keep) : tmp.file("smooth.png");
  ASSERT_TRUE(plot_metrics_png(tmp.file("noisy.jsonl"), png2, opt, &info).ok());
  const Image img2 = read_png(png2);
  EXPECT_GT(count_color(img2, info.loss, opt.loss_smooth), 500);
}

TEST(Plot, SparsePointsAreJoinedByLines) {
  TempDir tmp;
  // A zigzag of 11 points: between neighbours every pixel column and row must be covered by the joining line.
  {
    std::ofstream f(tmp.file("zig.jsonl"));
    for (int s = 0; s <= 10; ++s) f << "{\"step\":" << 100 * s << ",\"loss\":" << (s % 2 == 0 ? 1 : 5) << "}\n";
  }
  PlotOptions opt;
  opt.smoothing = 0.0;
  PlotInfo info;
  ASSERT_TRUE(plot_metrics_png(tmp.file("zig.jsonl"), tmp.file("zig.png"), opt, &info).ok());
  const Image img = read_png(tmp.file("zig.png"));
  const PlotPanel& L = info.loss;
  for (int x = L.x0; x <= L.x1; ++x) {
    bool hit = false;
    for (int y = L.y0; y <= L.y1 && !hit; ++y) hit = img.at(x, y) == opt.loss_raw;
    EXPECT_TRUE(hit) << "column " << x;
  }
  // The first segment (step 0, loss 1) -> (step 100, loss 5) passes through its midpoint, and every row between
  // its end points is covered.
  EXPECT_EQ(img.at(L.px(50.0), L.py(3.0)), opt.loss_raw);
  for (int y = L.py(5.0); y <= L.py(1.0); ++y) {
    bool hit = false;
    for (int x = L.px(0.0); x <= L.px(100.0) + 1 && !hit; ++x) hit = img.at(x, y) == opt.loss_raw;
    EXPECT_TRUE(hit) << "row " << y;
  }
}

TEST(Plot, DegenerateInputs) {
  TempDir tmp;
  const std::string png = tmp.file("p.png");
  PlotOptions opt;
  opt.smoothing = 0.0;  // (with smoothing, the overlay would cover the single raw point)
  // A single point and no throughput: still a figure (flat range padded, empty throughput panel).
  std::ofstream(tmp.file("one.jsonl")) << "{\"step\":5,\"loss\":3.0}\n";
  PlotInfo info;
  ASSERT_TRUE(plot_metrics_png(tmp.file("one.jsonl"), png, opt, &info).ok());
  EXPECT_EQ(info.loss.points, 1);
  EXPECT_EQ(info.throughput.points, 0);
  EXPECT_EQ(info.loss.xmin, 4.0);
  EXPECT_EQ(info.loss.xmax, 6.0);
  EXPECT_NEAR(info.loss.ymin, 2.85, 1e-12);
  const Image img = read_png(png);
  EXPECT_EQ(img.at(info.loss.px(5.0), info.loss.py(3.0)), opt.loss_raw);
  // Duplicated steps keep the last value.
  std::ofstream(tmp.file("dup.jsonl")) << "{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":9}\n{\"step\":2,\"loss\":2}\n"
                                       << "garbage\n{\"step\":3,\"loss\":3}\n";
  ASSERT_TRUE(plot_metrics_png(tmp.file("dup.jsonl"), png, opt, &info).ok());
  EXPECT_EQ(info.loss.points, 3);
  EXPECT_NEAR(info.loss.ymax, 3.1, 1e-12);
}

TEST(Plot, ErrorsAreStatuses) {
  TempDir tmp;
  PlotOptions opt;
  auto missing = plot_metrics_png(tmp.file("none.jsonl"), tmp.file("p.png"), opt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("none.jsonl"), std::string::npos);
  std::ofstream(tmp.file("noloss.jsonl")) << "{\"step\":1,\"tokens_per_s\":5}\n{\"step\":2,\"loss\":null}\n";
  auto noloss = plot_metrics_png(tmp.file("noloss.jsonl"), tmp.file("p.png"), opt);
  ASSERT_FALSE(noloss.ok());
  EXPECT_NE(noloss.message().find("no finite 'loss' values"), std::string::npos) << noloss.message();
  EXPECT_FALSE(fs::exists(tmp.file("p.png")));
  std::ofstream(tmp.file("ok.jsonl")) << "{\"step\":1,\"loss\":1}\n";
  opt.width = 10;
  EXPECT_FALSE(plot_metrics_png(tmp.file("ok.jsonl"), tmp.file("p.png"), opt).ok());
  opt.width = 800;
  opt.smoothing = 1.0;
  EXPECT_FALSE(plot_metrics_png(tmp.file("ok.jsonl"), tmp.file("p.png"), opt).ok());
  opt.smoothing = 0.5;
  EXPECT_FALSE(plot_metrics_png(tmp.file("ok.jsonl"), tmp.file("no_dir/p.png"), opt).ok());
}
