// The demo questions and their pixel-computed answers. See demo_tasks.hpp.
#include "demo_tasks.hpp"

#include <algorithm>
#include <array>

#include "vlpar/data/image_processor.hpp"

namespace vlpar::tools {

const std::vector<QuestionSpec>& question_specs() {
  static const std::vector<QuestionSpec> specs = {
      {QuestionType::kBrighterLR, "brighter_lr", {"left", "right"}},
      {QuestionType::kBrighterTB, "brighter_tb", {"top", "bottom"}},
      {QuestionType::kOrientation, "orientation", {"wider", "taller"}},
      {QuestionType::kColour, "colour", {"red", "green", "blue"}},
  };
  return specs;
}

const char* quadrant_name(Quadrant q) {
  switch (q) {
    case Quadrant::kTopLeft: return "top-left";
    case Quadrant::kTopRight: return "top-right";
    case Quadrant::kBottomLeft: return "bottom-left";
    case Quadrant::kBottomRight: return "bottom-right";
  }
  return "?";
}

std::string question_text(QuestionType type, Quadrant quadrant) {
  switch (type) {
    case QuestionType::kBrighterLR: return "Which half of the picture is brighter, left or right?";
    case QuestionType::kBrighterTB: return "Which half of the picture is brighter, top or bottom?";
    case QuestionType::kOrientation: return "Is the picture wider or taller?";
    case QuestionType::kColour:
      return std::string("Which colour dominates the ") + quadrant_name(quadrant) +
             " quarter of the picture: red, green or blue?";
  }
  return "";
}

RegionMeans region_means(const data::Image& image, Rect rect) {
  uint64_t s[3] = {0, 0, 0};
  for (int64_t y = rect.y; y < rect.y + rect.h; ++y) {
    const uint8_t* p = image.row(y) + 3 * rect.x;
    for (int64_t x = 0; x < rect.w; ++x, p += 3) {
      s[0] += p[0];
      s[1] += p[1];
      s[2] += p[2];
    }
  }
  const double n = static_cast<double>(rect.w * rect.h);
  return RegionMeans{double(s[0]) / n, double(s[1]) / n, double(s[2]) / n};
}

IntegralImage::IntegralImage(const data::Image& image) : width_(image.width), height_(image.height) {
  const int64_t stride = (width_ + 1) * 3;
  sums_.assign(static_cast<size_t>((height_ + 1) * stride), 0);
  for (int64_t y = 0; y < height_; ++y) {
    uint64_t row[3] = {0, 0, 0};
    const uint8_t* p = image.row(y);
    uint64_t* above = &sums_[static_cast<size_t>(y * stride)];
    uint64_t* here = &sums_[static_cast<size_t>((y + 1) * stride)];
    for (int64_t x = 0; x < width_; ++x) {
      for (int c = 0; c < 3; ++c) {
        row[c] += p[3 * x + c];
        here[3 * (x + 1) + c] = above[3 * (x + 1) + c] + row[c];
      }
    }
  }
}

RegionMeans IntegralImage::means(Rect r) const {
  const int64_t stride = (width_ + 1) * 3;
  auto at = [&](int64_t y, int64_t x, int c) { return sums_[static_cast<size_t>(y * stride + 3 * x + c)]; };
  double m[3];
  const double n = static_cast<double>(r.w * r.h);
  for (int c = 0; c < 3; ++c) {
    const uint64_t s = at(r.y + r.h, r.x + r.w, c) - at(r.y, r.x + r.w, c) - at(r.y + r.h, r.x, c) + at(r.y, r.x, c);
    m[c] = double(s) / n;
  }
  return RegionMeans{m[0], m[1], m[2]};
}

// Halves with integer bounds: the first half is [0, ⌊n/2⌋), the second [⌈n/2⌉, n).
Rect left_half(Rect o) { return Rect{o.x, o.y, o.w / 2, o.h}; }
Rect right_half(Rect o) { return Rect{o.x + (o.w + 1) / 2, o.y, o.w / 2, o.h}; }
Rect top_half(Rect o) { return Rect{o.x, o.y, o.w, o.h / 2}; }
Rect bottom_half(Rect o) { return Rect{o.x, o.y + (o.h + 1) / 2, o.w, o.h / 2}; }

Rect quarter(Rect o, Quadrant q) {
  const bool right = q == Quadrant::kTopRight || q == Quadrant::kBottomRight;
  const bool bottom = q == Quadrant::kBottomLeft || q == Quadrant::kBottomRight;
  const Rect half = right ? right_half(o) : left_half(o);
  return bottom ? bottom_half(half) : top_half(half);
}

Answer brighter_answer(const RegionMeans& first, const RegionMeans& second) {
  const double d = first.luma() - second.luma();
  return Answer{d >= 0 ? 0 : 1, std::abs(d) / 255.0};
}

Answer colour_answer(const RegionMeans& m) {
  const std::array<double, 3> v = {m.r, m.g, m.b};
  int best = 0;
  for (int c = 1; c < 3; ++c)
    if (v[c] > v[best]) best = c;
  double second = -1.0;
  for (int c = 0; c < 3; ++c)
    if (c != best) second = std::max(second, v[c]);
  return Answer{best, (v[best] - second) / 255.0};
}

Result<Answer> answer_for(const data::Image& image, QuestionType type, Quadrant quadrant,
                          const OrientationConfig& orientation) {
  VLPAR_RETURN_IF_ERROR(image.validate("answer_for"));
  const Rect all{0, 0, image.width, image.height};
  switch (type) {
    case QuestionType::kBrighterLR:
      VLPAR_CHECK(image.width >= 2, "answer_for: brighter_lr needs width >= 2, got {}", image.width);
      return brighter_answer(region_means(image, left_half(all)), region_means(image, right_half(all)));
    case QuestionType::kBrighterTB:
      VLPAR_CHECK(image.height >= 2, "answer_for: brighter_tb needs height >= 2, got {}", image.height);
      return brighter_answer(region_means(image, top_half(all)), region_means(image, bottom_half(all)));
    case QuestionType::kOrientation: {
      VLPAR_ASSIGN_OR_RETURN(data::ResizedSize s,
                             data::smart_resize(image.height, image.width, orientation.factor,
                                                orientation.min_pixels, orientation.max_pixels));
      const int64_t lo = std::min(s.height, s.width), hi = std::max(s.height, s.width);
      return Answer{s.width > s.height ? 0 : 1, double(hi) / double(lo) - 1.0};
    }
    case QuestionType::kColour:
      VLPAR_CHECK(image.width >= 2 && image.height >= 2, "answer_for: colour needs a 2x2 image or larger");
      return colour_answer(region_means(image, quarter(all, quadrant)));
  }
  return VLPAR_STATUS(StatusCode::kInvalidArgument, "answer_for: unknown question type {}", static_cast<int>(type));
}

}  // namespace vlpar::tools
